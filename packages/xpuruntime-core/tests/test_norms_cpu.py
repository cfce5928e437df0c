"""LayerNorm/RMSNorm through xpuruntime.ops on the CPU kernels, against float64 numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.record import ExecutionRecord

Array = np.ndarray[Any, Any]


def _reference(
    x: Array, weight: Array | None, bias: Array | None, eps: float, rms: bool
) -> tuple[Array, Array, Array]:
    """(y, mean, rstd) in float64."""
    x = x.astype(np.float64)
    mean = np.zeros(x.shape[:-1]) if rms else x.mean(-1)
    centred = x - mean[..., None]
    rstd = 1.0 / np.sqrt((centred**2).mean(-1) + eps)
    y = centred * rstd[..., None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


def _reference_grads(
    dy: Array, x: Array, weight: Array | None, eps: float, rms: bool
) -> tuple[Array, Array, Array]:
    """(dx, dweight, dbias) in float64, from the closed form."""
    dy, x = dy.astype(np.float64), x.astype(np.float64)
    _, mean, rstd = _reference(x, None, None, eps, rms)
    xhat = (x - mean[..., None]) * rstd[..., None]
    g = dy * weight if weight is not None else dy
    c1 = (xhat * g).mean(-1, keepdims=True)
    c2 = 0.0 if rms else g.mean(-1, keepdims=True)
    dx = rstd[..., None] * (g - xhat * c1 - c2)
    rows = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(rows), dy.sum(rows)


def _data(shape: tuple[int, ...], dtype: Any, seed: int) -> list[Array]:
    rng = np.random.default_rng(seed)
    h = shape[-1]
    return [
        (rng.standard_normal(shape) * 2 + 0.5).astype(dtype),  # x
        rng.standard_normal(shape).astype(dtype),  # residual
        (rng.standard_normal(h) * 0.3 + 1).astype(dtype),  # weight
        rng.standard_normal(h).astype(dtype),  # bias
        rng.standard_normal(shape).astype(dtype),  # dy
    ]


SHAPES = [(1, 1), (3, 7), (2, 3, 33), (5, 1000), (1, 4097)]


def _own(array: Any) -> Array:
    """A writable copy: numpy marks arrays it imports through DLPack read-only, and exports
    only writable ones, so results go back into ops as copies."""
    return np.array(array)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kernel", ["xrt", "cpu"])
def test_layernorm_forward_and_backward(dtype: Any, shape: tuple[int, ...], kernel: str) -> None:
    x, _, w, b, dy = _data(shape, dtype, 0)
    policy = KernelPolicy(layernorm=kernel)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    out = ops.layernorm_forward(x, w, b, 1e-5, policy=policy)
    y, mean, rstd = _reference(x, w, b, 1e-5, rms=False)
    np.testing.assert_allclose(out.y, y, rtol=tol, atol=tol)
    np.testing.assert_allclose(out.mean, mean.reshape(-1), rtol=tol, atol=tol)
    np.testing.assert_allclose(out.rstd, rstd.reshape(-1), rtol=tol, atol=tol)
    assert out.y.dtype == dtype
    assert out.sum is None
    assert out.mean.dtype == dtype  # float32 stats for float32, float64 for float64
    grads = ops.layernorm_backward(dy, x, w, _own(out.mean), _own(out.rstd), policy=policy)
    dx, dw, db = _reference_grads(dy, x, w, 1e-5, rms=False)
    scale = max(1.0, float(np.abs(dw).max()))
    np.testing.assert_allclose(grads.dx, dx, rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(grads.dweight, dw, rtol=tol * 10, atol=tol * 10 * scale)
    np.testing.assert_allclose(grads.dbias, db, rtol=tol * 10, atol=tol * 10 * scale)
    assert ops.last_decision().kernel == kernel  # type: ignore[union-attr]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_rmsnorm_forward_and_backward(dtype: Any, shape: tuple[int, ...]) -> None:
    x, _, w, _, dy = _data(shape, dtype, 1)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    out = ops.rmsnorm_forward(x, w, 1e-6)
    y, _, rstd = _reference(x, w, None, 1e-6, rms=True)
    np.testing.assert_allclose(out.y, y, rtol=tol, atol=tol)
    np.testing.assert_allclose(out.rstd, rstd.reshape(-1), rtol=tol, atol=tol)
    assert out.mean is None
    np.testing.assert_allclose(ops.rmsnorm(x, w, 1e-6), out.y)
    grads = ops.rmsnorm_backward(dy, x, w, _own(out.rstd))
    dx, dw, _ = _reference_grads(dy, x, w, 1e-6, rms=True)
    scale = max(1.0, float(np.abs(dw).max()))
    np.testing.assert_allclose(grads.dx, dx, rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(grads.dweight, dw, rtol=tol * 10, atol=tol * 10 * scale)
    assert grads.dbias is None


@pytest.mark.parametrize("rms", [False, True])
def test_residual_form_returns_the_sum_and_adds_its_gradient(rms: bool) -> None:
    x, residual, w, b, dy = _data((4, 24), np.float64, 2)
    ds = np.random.default_rng(3).standard_normal(x.shape)
    total = x + residual
    if rms:
        y, s = ops.add_rmsnorm(x, residual, w, 1e-6)
        out = ops.rmsnorm_forward(x, w, 1e-6, residual=residual)
        grads = ops.rmsnorm_backward(dy, _own(out.sum), w, _own(out.rstd), dsum=ds)
    else:
        y, s = ops.add_layernorm(x, residual, w, b, 1e-6)
        out = ops.layernorm_forward(x, w, b, 1e-6, residual=residual)
        grads = ops.layernorm_backward(
            dy, _own(out.sum), w, _own(out.mean), _own(out.rstd), dsum=ds
        )
    np.testing.assert_array_equal(s, total)
    np.testing.assert_array_equal(out.sum, total)
    np.testing.assert_allclose(
        y, _reference(total, w, None if rms else b, 1e-6, rms)[0], rtol=1e-12
    )
    dx, dw, _ = _reference_grads(dy, total, w, 1e-6, rms)
    np.testing.assert_allclose(grads.dx, dx + ds, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads.dweight, dw, rtol=1e-10, atol=1e-12)


def test_weight_and_bias_are_optional() -> None:
    x = _data((3, 16), np.float32, 4)[0]
    np.testing.assert_allclose(
        ops.layernorm(x), _reference(x, None, None, 1e-5, False)[0], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        ops.rmsnorm(x), _reference(x, None, None, 1e-6, True)[0], rtol=1e-5, atol=1e-5
    )
    out = ops.layernorm_forward(x)
    grads = ops.layernorm_backward(x, x, None, _own(out.mean), _own(out.rstd), with_dbias=False)
    assert grads.dweight is None
    assert grads.dbias is None


def test_decisions_are_recorded_with_the_kernel_detail() -> None:
    x, _, w, b, _ = _data((2, 8), np.float32, 5)
    record = ExecutionRecord(kind="inference")
    ops.layernorm(x, w, b, record=record)
    ops.rmsnorm(x, w, record=record)
    out = ops.rmsnorm_forward(x, w)
    ops.rmsnorm_backward(x, x, w, _own(out.rstd), record=record)
    assert [(d.op, d.kernel) for d in record.decisions] == [
        ("layernorm", "xrt"),
        ("rmsnorm", "xrt"),
        ("rmsnorm_backward", "xrt"),
    ]
    assert "CPU reference" in record.decisions[0].reason


def test_bad_arguments_are_explained() -> None:
    x = np.ones((2, 4), np.float32)
    with pytest.raises(rt.InvalidArgumentError, match=r"weight must have shape \[4\]"):
        ops.layernorm(x, np.ones(3, np.float32))
    with pytest.raises(rt.InvalidArgumentError, match="residual is float64 but x is float32"):
        ops.add_rmsnorm(x, np.ones((2, 4)))
    with pytest.raises(rt.InvalidArgumentError, match=r"residual must have shape \[2, 4\]"):
        ops.add_layernorm(x, np.ones((2, 3), np.float32))
    with pytest.raises(rt.InvalidArgumentError, match="eps must be a finite number >= 0"):
        ops.rmsnorm(x, eps=float("nan"))
    out = ops.layernorm_forward(x)
    with pytest.raises(rt.InvalidArgumentError, match="rstd must be float32"):
        ops.layernorm_backward(x, x, None, _own(out.mean), out.rstd.astype(np.float64))


def test_unsupported_dtype_pinned_raises_and_auto_explains() -> None:
    x = np.ones((2, 4), np.float16)
    with pytest.raises(rt.UnsupportedOperationError, match=r"float32/float64 .*got float16"):
        ops.rmsnorm(x, policy=KernelPolicy(rmsnorm="cpu"))
    with pytest.raises(
        rt.UnsupportedOperationError, match="no registered kernel can run layernorm float16"
    ):
        ops.layernorm(x)


def test_registry_lists_the_norm_ops() -> None:
    assert {"layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward"} <= set(
        rt.dispatcher.ops()
    )
    assert [k.name for k in rt.dispatcher.kernels("rmsnorm")] == ["xrt", "cpu"]
    ok, why = rt.dispatcher.supports("rmsnorm", "xrt", [4, 8], "bfloat16", "cpu")
    assert not ok
    assert "float32/float64 on the CPU" in why
