"""ops.linear and its backward helpers on the CPU reference kernel, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.runtime.record import ExecutionRecord

SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)


def gelu(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z**3)))


def gelu_grad(z: np.ndarray) -> np.ndarray:
    t = np.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * z * z)


ACTIVATIONS = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0), "gelu": gelu}


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return (
        rng.standard_normal((2, 5, 7)),  # x [..., K]
        rng.standard_normal((6, 7)),  # w [N, K]
        rng.standard_normal(6),  # bias [N]
    )


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_numpy(data, activation, with_bias) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    bias = b if with_bias else None
    y = ops.linear(x, w, bias, activation)
    z = x @ w.T + (b if with_bias else 0)
    np.testing.assert_allclose(y, ACTIVATIONS[activation](z), rtol=1e-10, atol=1e-12)
    decision = ops.last_decision()
    assert decision is not None
    assert decision.op == "linear"
    assert decision.kernel == "cpu"
    assert decision.layout.startswith("NT")  # x row-major, w used transposed
    epilogue = {None: "BIAS", "relu": "RELU_BIAS", "gelu": "GELU_BIAS"}[activation]
    if not with_bias:
        epilogue = {None: "", "relu": "RELU", "gelu": "GELU"}[activation]
    assert decision.layout == ("NT+" + epilogue if epilogue else "NT")


def test_linear_saves_the_preactivation_with_a_padded_row_stride(data) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    y, z = ops.linear(x, w, b, "gelu", save_preactivation=True)
    np.testing.assert_allclose(z, (x @ w.T + b).reshape(-1, 6), rtol=1e-12, atol=1e-12)
    assert z.strides[0] == 8 * z.itemsize  # 6 rounded up to a multiple of 8
    np.testing.assert_allclose(y, gelu(x @ w.T + b), rtol=1e-9, atol=1e-12)
    with pytest.raises(rt.InvalidArgumentError, match="save_preactivation applies to"):
        ops.linear(x, w, b, "relu", save_preactivation=True)


def test_backward_helpers_match_the_analytic_gradients(data) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    x2 = x.reshape(-1, 7)
    _, z = ops.linear(x2, w, b, "gelu", save_preactivation=True)
    dy = np.random.default_rng(6).standard_normal((10, 6))
    dz_ref = dy * gelu_grad(x2 @ w.T + b)
    dx, dw, db = ops.linear_backward(dy, x2, w, activation="gelu", saved=z)
    np.testing.assert_allclose(dx, dz_ref @ w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw, dz_ref.T @ x2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, dz_ref.sum(0), rtol=1e-9, atol=1e-12)
    dw_only, none = ops.linear_weight_grad(dz_ref, x2, bias_grad=False)
    assert none is None
    np.testing.assert_allclose(dw_only, dz_ref.T @ x2, rtol=1e-9, atol=1e-12)
    # relu takes the output as `saved`
    y = ops.linear(x2, w, b, "relu")
    dx_r, _, db_r = ops.linear_backward(dy, x2, w, activation="relu", saved=y)
    dz_r = dy * (x2 @ w.T + b > 0)
    np.testing.assert_allclose(dx_r, dz_r @ w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db_r, dz_r.sum(0), rtol=1e-9, atol=1e-12)


def test_gelu_grad_through_the_next_layer(data) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    x2 = x.reshape(-1, 7)
    _, z = ops.linear(x2, w, b, "gelu", save_preactivation=True)
    w2 = np.random.default_rng(7).standard_normal((3, 6))  # next layer: h @ w2.T
    g = np.random.default_rng(8).standard_normal((10, 3))  # dL/dy2
    dz, db = ops.linear_gelu_grad(g, w2, z)
    expected = (g @ w2) * gelu_grad(x2 @ w.T + b)
    np.testing.assert_allclose(dz, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, expected.sum(0), rtol=1e-9, atol=1e-12)
    assert ops.last_decision().layout == "NN+DGELU_BGRAD"  # type: ignore[union-attr]


def test_linear_records_into_a_record(data) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    record = ExecutionRecord(kind="inference")
    ops.linear(x, w, b, "gelu", record=record)
    (decision,) = record.decisions
    assert decision.op == "linear"
    assert decision.status == "decided"
    assert "NT+GELU_BIAS" in decision.reason


def test_linear_bad_arguments_are_explained(data) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data
    with pytest.raises(rt.InvalidArgumentError, match="differ in in_features"):
        ops.linear(x, w.T.copy(), b)
    with pytest.raises(rt.InvalidArgumentError, match=r"bias must have shape \[6\]"):
        ops.linear(x, w, b[:3])
    with pytest.raises(rt.InvalidArgumentError, match="unknown activation 'tanh'"):
        ops.linear(x, w, b, "tanh")  # type: ignore[arg-type]
    with pytest.raises(rt.InvalidArgumentError, match="precision 'bf16'"):
        ops.linear(x, w, b, precision="bf16")  # type: ignore[arg-type]
