"""LayerNorm/RMSNorm custom ops on the CPU: opcheck, numerics and gradients against PyTorch,
the residual form, the kernel choice and its record, fallbacks, torch.compile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, OpPolicy
from xpuruntime.pytorch.ops import (
    fused_add_layernorm,
    fused_add_rmsnorm,
    fused_layernorm,
    fused_rmsnorm,
)
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    UnsupportedOperationError,
)
from xpuruntime.runtime.record import FallbackWarning

OPS = torch.ops.xpuruntime


def _kernels(op: str) -> list[str]:
    return [d.kernel for d in xrt_torch.current_record().decisions if d.op == op]


def _tensors(
    shape: tuple[int, ...], normalized: int, dtype: torch.dtype = torch.float64, seed: int = 0
) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    wshape = shape[len(shape) - normalized :]
    return {
        "x": (torch.randn(shape, dtype=dtype) * 2 + 0.5).requires_grad_(),
        "residual": torch.randn(shape, dtype=dtype).requires_grad_(),
        "weight": (torch.randn(wshape, dtype=dtype) * 0.3 + 1).requires_grad_(),
        "bias": torch.randn(wshape, dtype=dtype).requires_grad_(),
    }


# --- opcheck: schema, fake kernels, autograd registration, AOT dispatch -----------------------

OPCHECK_TESTS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


@pytest.mark.parametrize("kernel", ["xrt", "cpu", "torch"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("residual", [False, True])
def test_forward_ops_pass_opcheck(kernel: str, norm: str, residual: bool) -> None:
    t = _tensors((3, 5, 8), 1)
    bias = t["bias"] if norm == "layernorm" else None
    if residual:
        op = getattr(OPS, f"fused_add_{norm}").default
        args: tuple[Any, ...] = (t["x"], t["residual"], [8], t["weight"], bias, 1e-5, kernel, "pin")
    else:
        op = getattr(OPS, f"fused_{norm}").default
        args = (t["x"], [8], t["weight"], bias, 1e-5, kernel, "pin")
    torch.library.opcheck(op, args, test_utils=OPCHECK_TESTS)


@pytest.mark.parametrize("kernel", ["xrt", "torch"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_backward_ops_pass_opcheck(kernel: str, norm: str) -> None:
    t = {k: v.detach() for k, v in _tensors((4, 6), 1).items()}
    _, stats = getattr(OPS, f"fused_{norm}")(t["x"], [6], t["weight"], None, 1e-5, kernel, "pin")
    args = (t["residual"], t["x"], [6], t["weight"], stats, None, True, norm == "layernorm",
            kernel, "pin")  # fmt: skip
    torch.library.opcheck(
        getattr(OPS, f"fused_{norm}_backward").default, args, test_utils=OPCHECK_TESTS
    )


# --- numerics against PyTorch ---------------------------------------------------------------


def _grads(
    output: torch.Tensor | tuple[torch.Tensor, ...], inputs: list[torch.Tensor]
) -> list[Any]:
    outputs = output if isinstance(output, tuple) else (output,)
    torch.manual_seed(1)
    loss = sum((o * torch.randn_like(o)).sum() for o in outputs)
    return list(torch.autograd.grad(loss, inputs, allow_unused=True, retain_graph=True))


def _reference_layernorm(t: dict[str, torch.Tensor], shape: list[int]) -> torch.Tensor:
    return F.layer_norm(t["x"], shape, t["weight"], t["bias"], 1e-5)


def _reference_rmsnorm(t: dict[str, torch.Tensor], shape: list[int]) -> torch.Tensor:
    return F.rms_norm(t["x"], shape, t["weight"], 1e-6)


CASES = [((1, 1), 1), ((3, 7), 1), ((2, 3, 33), 1), ((4, 5, 6), 2), ((2, 1000), 1)]


@pytest.mark.parametrize("kernel", ["xrt", "cpu", "torch"])
@pytest.mark.parametrize(("shape", "normalized"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layernorm_matches_pytorch(
    kernel: str, shape: tuple[int, ...], normalized: int, dtype: torch.dtype
) -> None:
    t = _tensors(shape, normalized, dtype)
    ns = list(shape[-normalized:])
    inputs = [t["x"], t["weight"], t["bias"]]
    expected = _reference_layernorm(t, ns)
    with xrt_torch.kernel_policy(layernorm=kernel):
        got = fused_layernorm(t["x"], ns, t["weight"], t["bias"], 1e-5)
        assert _kernels("layernorm") == [kernel]
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, expected, **tol)
    # float32: PyTorch's own rounding noise is ~1e-5 where the exact gradient is 0 (h = 1)
    grad_tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for g, e in zip(_grads(got, inputs), _grads(expected, inputs), strict=True):
        torch.testing.assert_close(g, e, **grad_tol)


@pytest.mark.parametrize("kernel", ["xrt", "cpu", "torch"])
@pytest.mark.parametrize(("shape", "normalized"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rmsnorm_matches_pytorch(
    kernel: str, shape: tuple[int, ...], normalized: int, dtype: torch.dtype
) -> None:
    t = _tensors(shape, normalized, dtype)
    ns = list(shape[-normalized:])
    inputs = [t["x"], t["weight"]]
    expected = _reference_rmsnorm(t, ns)
    with xrt_torch.kernel_policy(rmsnorm=kernel):
        got = fused_rmsnorm(t["x"], ns, t["weight"], 1e-6)
        assert _kernels("rmsnorm") == [kernel]
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, expected, **tol)
    # float32: PyTorch's own rounding noise is ~1e-5 where the exact gradient is 0 (h = 1)
    grad_tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for g, e in zip(_grads(got, inputs), _grads(expected, inputs), strict=True):
        torch.testing.assert_close(g, e, **grad_tol)


@pytest.mark.parametrize("kernel", ["xrt", "torch"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_residual_form_matches_pytorch(kernel: str, norm: str) -> None:
    t = _tensors((3, 4, 24), 1)
    inputs = [t["x"], t["residual"], t["weight"]]
    total = t["x"] + t["residual"]
    if norm == "layernorm":
        inputs.append(t["bias"])
        expected = (F.layer_norm(total, [24], t["weight"], t["bias"], 1e-5), total)
    else:
        expected = (F.rms_norm(total, [24], t["weight"], 1e-6), total)
    with xrt_torch.kernel_policy(**{norm: kernel}):
        if norm == "layernorm":
            got = fused_add_layernorm(t["x"], t["residual"], 24, t["weight"], t["bias"], 1e-5)
        else:
            got = fused_add_rmsnorm(t["x"], t["residual"], 24, t["weight"], 1e-6)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    # Both outputs carry gradient (y into the next layer, s along the residual stream).
    for g, e in zip(_grads(got, inputs), _grads(expected, inputs), strict=True):
        torch.testing.assert_close(g, e)
    # Only y used: the sum's gradient is absent, not zeros.
    for g, e in zip(_grads(got[0], inputs), _grads(expected[0], inputs), strict=True):
        torch.testing.assert_close(g, e)


def test_no_weight_no_bias_and_default_eps() -> None:
    x = torch.randn(4, 16, dtype=torch.float32)
    torch.testing.assert_close(fused_layernorm(x, [16]), F.layer_norm(x, [16]))
    torch.testing.assert_close(fused_rmsnorm(x, [16]), F.rms_norm(x, [16]))  # eps=None
    xg = x.clone().requires_grad_()
    (g,) = _grads(fused_rmsnorm(xg, 16), [xg])
    (e,) = _grads(F.rms_norm(xg, [16]), [xg])
    torch.testing.assert_close(g, e)


def test_non_contiguous_input_is_normalised() -> None:
    x = torch.randn(16, 8, dtype=torch.float64).t()  # 8 rows of 16, strided
    w = torch.randn(16, dtype=torch.float64)
    torch.testing.assert_close(fused_rmsnorm(x, [16], w, 1e-6), F.rms_norm(x, [16], w, 1e-6))


def test_no_grad_and_inference_mode_run_the_core_kernel() -> None:
    t = _tensors((3, 8), 1)
    with torch.no_grad():
        y = fused_layernorm(t["x"], [8], t["weight"], t["bias"])
    with torch.inference_mode():
        y2 = fused_layernorm(t["x"], [8], t["weight"], t["bias"])
    torch.testing.assert_close(y, y2)
    assert y.grad_fn is None
    assert _kernels("layernorm") == ["xrt"]


# --- the dispatcher path (fake tensors, modes) -------------------------------------------------


def test_fake_tensors_take_the_op_path() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(5, 3, 32)
        w = torch.empty(32)
        y, s = fused_add_rmsnorm(x, x, [32], w)
        z = fused_layernorm(x, [3, 32])
    assert y.shape == s.shape == z.shape == (5, 3, 32)


def test_op_path_and_eager_path_agree() -> None:
    t = _tensors((4, 12), 1)
    eager = fused_add_layernorm(t["x"], t["residual"], [12], t["weight"], t["bias"])
    direct = OPS.fused_add_layernorm(
        t["x"], t["residual"], [12], t["weight"], t["bias"], 1e-5, "auto", "auto"
    )
    torch.testing.assert_close(eager[0], direct[0])
    torch.testing.assert_close(eager[1], direct[1])
    inputs = [t["x"], t["residual"], t["weight"], t["bias"]]
    for g, e in zip(_grads(eager, inputs), _grads(tuple(direct[:2]), inputs), strict=True):
        torch.testing.assert_close(g, e)


# --- kernel choice, record, fallbacks ----------------------------------------------------------


def test_without_policy_the_core_runs_and_each_shape_is_recorded_once() -> None:
    for rows in (2, 2, 3):
        fused_rmsnorm(torch.randn(rows, 8), [8])
    decisions = [d for d in xrt_torch.current_record().decisions if d.op == "rmsnorm"]
    assert [(d.kernel, d.mode, d.shape) for d in decisions] == [
        ("xrt", "auto", "2x8"),
        ("xrt", "auto", "3x8"),
    ]
    assert "core dispatcher" in decisions[0].reason


def test_a_new_policy_decides_again() -> None:
    x = torch.randn(2, 8)
    with xrt_torch.kernel_policy(rmsnorm="torch") as record:
        fused_rmsnorm(x, [8])
        assert [d.kernel for d in record.decisions] == ["torch"]
    with xrt_torch.kernel_policy(rmsnorm="cpu") as record:
        fused_rmsnorm(x, [8])
        assert [d.kernel for d in record.decisions] == ["cpu"]


def test_pinned_core_kernel_on_unsupported_dtype_raises_under_error() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    with (
        xrt_torch.kernel_policy(rmsnorm="xrt", exec_policy=ExecutionPolicy(fallback="error")),
        pytest.raises(UnsupportedOperationError, match=r"pins rmsnorm='xrt'.*bfloat16"),
    ):
        fused_rmsnorm(x, [8])


def test_pinned_core_kernel_on_unsupported_dtype_warns_and_records_under_warn() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    with (
        xrt_torch.kernel_policy(rmsnorm="xrt") as record,
        pytest.warns(FallbackWarning, match="bfloat16"),
    ):
        torch.testing.assert_close(fused_rmsnorm(x, [8]), F.rms_norm(x, [8]))
    assert [(f.requested, f.chosen, f.mode) for f in record.fallbacks] == [("xrt", "torch", "warn")]


def test_auto_on_unsupported_dtype_runs_pytorch_and_says_why() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    torch.testing.assert_close(fused_layernorm(x, [8]), F.layer_norm(x, [8]))
    decision = xrt_torch.current_record().decisions[-1]
    assert decision.kernel == "torch"
    assert "float32/float64 on the CPU" in decision.reason


def test_mixed_weight_dtype_is_refused_by_the_core_kernel() -> None:
    x = torch.randn(3, 8, dtype=torch.float64)
    w = torch.randn(8, dtype=torch.float32)
    with (
        xrt_torch.kernel_policy(layernorm="xrt", exec_policy=ExecutionPolicy(fallback="error")),
        pytest.raises(UnsupportedOperationError, match=r"weight is torch\.float32 but the input"),
    ):
        fused_layernorm(x, [8], w)


def test_preferred_kernel_falls_back_per_fallback_mode() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    policy = KernelPolicy(rmsnorm=OpPolicy(kernel="xrt", mode="prefer"))
    # A preferred kernel accepts a fallback by definition: warned under 'error' and 'warn'.
    with (
        xrt_torch.kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="error")),
        pytest.warns(FallbackWarning, match="rmsnorm"),
    ):
        fused_rmsnorm(x, [8])
    with xrt_torch.kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="allow")) as record:
        torch.testing.assert_close(fused_rmsnorm(x, [8]), F.rms_norm(x, [8]))
        assert record.fallbacks[-1].requested == "xrt"
        assert record.decisions[-1].kernel == "torch"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: fused_layernorm(x, [7]), r"normalized_shape \[7\] must be the trailing"),
        (lambda x: fused_layernorm(x, [8], torch.ones(7)), r"weight must have shape"),
        (lambda x: fused_add_rmsnorm(x, x[:, :4], [8]), r"residual must have the input's shape"),
        (lambda x: fused_add_rmsnorm(x, x.double(), [8]), r"residual must have the input's"),
        (lambda x: OPS.fused_rmsnorm(x, [8], None, x[0], 1e-6, "xrt", "pin"), "takes no bias"),
    ],
)
def test_bad_arguments_are_explained(call: Callable[[torch.Tensor], Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call(torch.randn(2, 8))


# --- torch.compile ---------------------------------------------------------------------------


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = torch.nn.Parameter(torch.ones(16))
        self.bias1 = torch.nn.Parameter(torch.zeros(16))
        self.norm2 = torch.nn.Parameter(torch.ones(16))
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h, residual = fused_add_rmsnorm(x, residual, [16], self.norm2, 1e-6)
        h = self.proj(h)
        return fused_layernorm(h + residual, [16], self.norm1, self.bias1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_norms_compile_with_fullgraph(backend: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = _Block()
    x, residual = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
    eager = block(x, residual)
    eager.sum().backward()
    expected = [p.grad.clone() for p in block.parameters()]  # type: ignore[union-attr]
    block.zero_grad()
    with xrt_torch.kernel_policy(layernorm="xrt", rmsnorm="xrt"):
        compiled = torch.compile(block, backend=backend, fullgraph=True)
        out = compiled(x, residual)
        out.sum().backward()
    torch.testing.assert_close(out, eager)
    for p, e in zip(block.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, e)
