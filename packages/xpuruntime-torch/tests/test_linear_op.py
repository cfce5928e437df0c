"""fused_linear: registration (opcheck), gradients equal PyTorch's, policies, torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.pytorch.ops import fused_linear
from xpuruntime.runtime.errors import UnsupportedOperationError


def _reference(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str | None
) -> torch.Tensor:
    z = F.linear(x, w, b)
    if activation == "relu":
        return F.relu(z)
    if activation == "gelu":
        return F.gelu(z, approximate="tanh")
    return z


def _inputs(dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 7, dtype=dtype, requires_grad=True)
    w = torch.randn(6, 7, dtype=dtype, requires_grad=True)
    b = torch.randn(6, dtype=dtype, requires_grad=True)
    return x, w, b


@pytest.mark.parametrize(
    ("kernel", "activation"),
    [("cpu", "gelu"), ("cpu", "relu"), ("torch", "gelu"), ("auto", "none")],
)
def test_fused_linear_opcheck(kernel: str, activation: str) -> None:
    x, w, b = _inputs()
    mode = "auto" if kernel == "auto" else "pin"
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_linear.default, (x, w, b, activation, kernel, mode)
    )


def test_fused_linear_weight_grad_opcheck() -> None:
    x, _, _ = _inputs()
    dz = torch.randn(2, 5, 6, dtype=torch.float64)
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_linear_weight_grad.default, (dz, x.detach(), True, "cpu", "pin")
    )


def test_core_writes_into_pytorchs_allocations() -> None:
    # The core's kernels write the results into tensors PyTorch allocated (what a CUDA graph
    # capture needs), never memory of the core's own pool that PyTorch adopts (a storage made
    # from a foreign pointer is not resizable; PyTorch's own allocations are).
    x, w, b = _inputs()
    op = torch.ops.xpuruntime
    with xrt_torch.kernel_policy(linear="cpu") as record:
        y = fused_linear(x.detach(), w.detach(), b.detach(), "gelu")
        g, z = op.fused_linear(x.detach(), w.detach(), b.detach(), "gelu", "cpu", "pin")
        dz = torch.randn(2, 5, 6, dtype=torch.float64)
        dw, db = op.fused_linear_weight_grad(dz, x.detach(), True, "cpu", "pin")
    assert {d.kernel for d in record.decisions if d.op == "linear"} == {"cpu"}
    for result in (y, g, z, dw, db):
        assert result.untyped_storage().resizable()
    expected = F.linear(x, w, b).detach()
    torch.testing.assert_close(z, expected)
    torch.testing.assert_close(g, F.gelu(expected, approximate="tanh"))
    torch.testing.assert_close(y, g)
    dz2, x2 = dz.reshape(-1, 6), x.detach().reshape(-1, 7)
    torch.testing.assert_close(dw, dz2.T @ x2)
    torch.testing.assert_close(db, dz2.sum(0))


@pytest.mark.parametrize("kernel", ["cpu", "torch"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_and_gradients_match_pytorch(
    kernel: str, activation: str | None, with_bias: bool
) -> None:
    x, w, b = _inputs()
    bias = b if with_bias else None
    with xrt_torch.kernel_policy(linear=kernel):
        y = fused_linear(x, w, bias, activation)
        y.sum().backward()
        decisions = [d for d in xrt_torch.current_record().decisions if d.op == "linear"]
        assert decisions[-1].kernel == kernel
    grads = [t.grad.clone() for t in (x, w) + ((b,) if with_bias else ())]  # type: ignore[union-attr]
    for t in (x, w, b):
        t.grad = None
    ref = _reference(x, w, bias, activation)
    ref.sum().backward()
    torch.testing.assert_close(y, ref)
    for got, t in zip(grads, (x, w) + ((b,) if with_bias else ()), strict=True):
        torch.testing.assert_close(got, t.grad)


def test_without_policy_the_core_serves_cpu_float() -> None:
    x, w, b = _inputs(torch.float32)
    fused_linear(x, w, b, "gelu")
    decision = [d for d in xrt_torch.current_record().decisions if d.op == "linear"][-1]
    assert decision.kernel == "cpu"
    assert "core dispatcher" in decision.reason


def test_pin_that_cannot_run_follows_the_fallback_mode() -> None:
    x, w, b = _inputs()
    with (
        pytest.raises(UnsupportedOperationError, match="pins linear='cublasLt'"),
        xrt_torch.kernel_policy(linear="cublasLt", exec_policy=ExecutionPolicy(fallback="error")),
    ):
        fused_linear(x, w, b)
    allow = ExecutionPolicy(fallback="allow")
    with xrt_torch.kernel_policy(linear="cublasLt", exec_policy=allow) as record:
        torch.testing.assert_close(fused_linear(x, w, b), F.linear(x, w, b))
    assert [(f.requested, f.mode) for f in record.fallbacks] == [("cublasLt", "allow")]
    x16 = x.detach().to(torch.bfloat16)
    with xrt_torch.kernel_policy(linear="torch"):
        torch.testing.assert_close(
            fused_linear(x16, w.detach().to(torch.bfloat16), None),
            F.linear(x16, w.detach().to(torch.bfloat16)),
        )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fused_linear_under_torch_compile(backend: str) -> None:
    torch._dynamo.reset()
    x, w, b = _inputs(torch.float32)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        return fused_linear(fused_linear(x, w, b, "gelu"), w[:, :6], b, "relu")

    with xrt_torch.kernel_policy(linear="cpu"):
        compiled = torch.compile(mlp, backend=backend, fullgraph=True)
        out = compiled(x)
        out.sum().backward()
    assert w.grad is not None
    ref_w_grad = w.grad.clone()
    w.grad = None
    ref = _reference(_reference(x, w, b, "gelu"), w[:, :6], b, "relu")
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ref_w_grad, w.grad, rtol=1e-4, atol=1e-4)


def test_prefer_records_the_kernel_and_reason_of_the_core_dispatcher() -> None:
    from xpuruntime.policies import KernelPolicy, OpPolicy

    x, w, b = _inputs(torch.float32)
    preferred = KernelPolicy(linear=OpPolicy(kernel="cpu", mode="prefer"))
    with xrt_torch.kernel_policy(preferred) as record:
        y = fused_linear(x, w, b, "relu")
    torch.testing.assert_close(y, _reference(x, w, b, "relu"))
    decision = [d for d in record.decisions if d.op == "linear"][-1]
    assert (decision.kernel, decision.mode) == ("cpu", "prefer")
    assert decision.reason.startswith("core dispatcher: ")
    assert len(decision.reason) > len("core dispatcher: ")
    assert record.fallbacks == []


def test_a_repeated_call_is_decided_and_recorded_once() -> None:
    x, w, b = _inputs(torch.float32)
    with xrt_torch.kernel_policy(linear="cpu") as record:
        first = fused_linear(x, w, b, "gelu")
        again = fused_linear(x, w, b, "gelu")
        other = fused_linear(x[:1], w, b, "gelu")
    torch.testing.assert_close(first, again)
    torch.testing.assert_close(other, first[:1])
    linear = [(d.kernel, d.shape) for d in record.decisions if d.op == "linear"]
    assert linear == [("cpu", "2x5x7"), ("cpu", "1x5x7")]


def test_strided_views_match_pytorch() -> None:
    # A transposed weight is a BLAS view the core takes as it is; a sliced input is not one
    # row index, which the core refuses: PyTorch serves it, and the record says why.
    torch.manual_seed(1)
    x = torch.randn(4, 6, 7, dtype=torch.float64)[:, :3]
    w = torch.randn(7, 6, dtype=torch.float64).t().requires_grad_()
    x.requires_grad_()
    y = fused_linear(x, w, None, "gelu")
    y.sum().backward()
    grads = (x.grad, w.grad)
    x.grad = w.grad = None
    _reference(x, w, None, "gelu").sum().backward()
    torch.testing.assert_close(grads, (x.grad, w.grad))
    decision = [d for d in xrt_torch.current_record().decisions if d.op == "linear"][-1]
    assert decision.kernel == "torch"
    assert "core cannot serve it" in decision.reason


def test_a_bad_activation_is_a_typed_error() -> None:
    from xpuruntime.runtime.errors import InvalidArgumentError

    x, w, b = _inputs()
    with pytest.raises(InvalidArgumentError, match="activation must be"):
        fused_linear(x, w, b, "tanh")
