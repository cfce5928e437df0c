"""Custom ops: registration (opcheck), kernels chosen by policy, errors, torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, OpPolicy
from xpuruntime.pytorch.ops import fused_attention, fused_layernorm
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import FallbackWarning


def _qkv(requires_grad: bool = True) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(
        torch.randn(2, 3, 8, 16, dtype=torch.float64, requires_grad=requires_grad) for _ in range(3)
    )


def _decisions(op: str) -> list[str]:
    return [d.kernel for d in xrt_torch.current_record().decisions if d.op == op]


@pytest.mark.parametrize("kernel", ["auto", "math", "flash_v2"])
def test_fused_attention_opcheck(kernel: str) -> None:
    q, k, v = _qkv()
    mode = "auto" if kernel == "auto" else "pin"
    dtype = torch.float32 if kernel == "flash_v2" else torch.float64
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    # flash_v2 cannot serve CPU tensors: this checks the (recorded) fallback path too.
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(fallback="allow")):
        torch.library.opcheck(
            torch.ops.xpuruntime.fused_attention.default,
            (q, k, v, None, 0.0, True, None, kernel, mode, True),
        )


def test_fused_attention_matches_sdpa_forward_and_backward() -> None:
    q, k, v = _qkv()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected.sum().backward()
    reference = [t.grad.clone() for t in (q, k, v)]  # type: ignore[union-attr]
    for t in (q, k, v):
        t.grad = None
    with xrt_torch.kernel_policy(attention="math"):
        got = fused_attention(q, k, v, is_causal=True)
        got.sum().backward()
        assert _decisions("attention") == ["math"]
    torch.testing.assert_close(got, expected)
    for tensor, grad in zip((q, k, v), reference, strict=True):
        torch.testing.assert_close(tensor.grad, grad)


# Decided for CUDA while these CPU tensors run: the op itself finds the kernel off its device.
CUDA_ERROR = ExecutionPolicy(device="cuda", fallback="error")


def test_pinned_backend_that_cannot_serve_this_device_raises() -> None:
    q, k, v = _qkv(requires_grad=False)
    with (
        xrt_torch.kernel_policy(attention="efficient", exec_policy=CUDA_ERROR),
        pytest.raises(UnsupportedOperationError, match="pins attention='efficient'") as info,
    ):
        fused_attention(q, k, v)
    assert "tensors are on cpu" in str(info.value)


def test_pinned_backend_falls_back_under_warn_with_pytorchs_choice() -> None:
    q, k, v = _qkv(requires_grad=False)
    expected = F.scaled_dot_product_attention(q, k, v)
    policy = ExecutionPolicy(device="cuda", fallback="warn")
    with xrt_torch.kernel_policy(attention="efficient", exec_policy=policy) as record:
        with pytest.warns(FallbackWarning, match="kernel for attention"):
            out = fused_attention(q, k, v)
        torch.testing.assert_close(out, expected)
        assert (record.fallbacks[-1].requested, record.fallbacks[-1].mode) == ("efficient", "warn")
        assert record.decisions[-1].kernel == "auto"


def test_preferred_backend_falls_back_warned_even_under_error() -> None:
    # Preferring accepts a fallback (inference treats 'prefer' the same way).
    q, k, v = _qkv(requires_grad=False)
    policy = KernelPolicy(attention=OpPolicy(kernel="efficient", mode="prefer"))
    with xrt_torch.kernel_policy(policy, exec_policy=CUDA_ERROR) as record:
        with pytest.warns(FallbackWarning, match="attention"):
            fused_attention(q, k, v)
        assert record.fallbacks[-1].mode == "warn"
    allow = ExecutionPolicy(device="cuda", fallback="allow")
    with xrt_torch.kernel_policy(policy, exec_policy=allow) as record:
        out = fused_attention(q, k, v)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
        assert record.fallbacks[-1].mode == "allow"
        assert record.decisions[-1].kernel == "auto"


def test_dropout_training_runs_pytorchs_autograd_on_the_pinned_backend() -> None:
    q, k, v = _qkv()
    with xrt_torch.kernel_policy(attention="math"):
        out = fused_attention(q, k, v, dropout_p=0.5)
        out.sum().backward()
    assert q.grad is not None
    assert _decisions("attention") == []  # cleared with the scope; decision was recorded in it


@pytest.mark.parametrize("kernel", ["torch", "cpu", "xrt"])
def test_fused_layernorm_opcheck(kernel: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, 8, requires_grad=True)
    weight = torch.randn(8, requires_grad=True)
    bias = torch.randn(8, requires_grad=True)
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_layernorm.default,
        (x, [8], weight, bias, 1e-5, kernel, "pin"),
    )


@pytest.mark.parametrize("kernel", ["torch", "cpu"])
def test_fused_layernorm_matches_pytorch_and_records_kernel(kernel: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, 8, requires_grad=True)
    weight = torch.randn(8, requires_grad=True)
    bias = torch.randn(8, requires_grad=True)
    expected = F.layer_norm(x, [8], weight, bias)
    expected.pow(2).sum().backward()
    grads = [t.grad.clone() for t in (x, weight, bias)]  # type: ignore[union-attr]
    for t in (x, weight, bias):
        t.grad = None
    with xrt_torch.kernel_policy(layernorm=kernel):
        got = fused_layernorm(x, [8], weight, bias)
        got.pow(2).sum().backward()
        assert _decisions("layernorm") == [kernel]
    torch.testing.assert_close(got, expected)
    for tensor, grad in zip((x, weight, bias), grads, strict=True):
        torch.testing.assert_close(tensor.grad, grad)


def test_fused_layernorm_without_policy_uses_the_core_and_says_so() -> None:
    x = torch.randn(3, 16)
    got = fused_layernorm(x, [16])
    torch.testing.assert_close(got, F.layer_norm(x, [16]))
    decision = xrt_torch.current_record().decisions[-1]
    assert (decision.op, decision.kernel, decision.mode) == ("layernorm", "xrt", "auto")


def test_fused_layernorm_multi_dim_normalized_shape() -> None:
    x = torch.randn(2, 3, 4, 5)
    weight, bias = torch.randn(4, 5), torch.randn(4, 5)
    with xrt_torch.kernel_policy(layernorm="xrt"):
        got = fused_layernorm(x, [4, 5], weight, bias)
    torch.testing.assert_close(got, F.layer_norm(x, [4, 5], weight, bias))


def test_core_layernorm_pinned_on_unsupported_dtype_follows_the_fallback_mode() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    with (
        xrt_torch.kernel_policy(layernorm="cpu", exec_policy=ExecutionPolicy(fallback="error")),
        pytest.raises(UnsupportedOperationError, match="pins layernorm='cpu'"),
    ):
        fused_layernorm(x, [8])
    with xrt_torch.kernel_policy(layernorm="cpu") as record:
        with pytest.warns(FallbackWarning, match="kernel for layernorm"):
            got = fused_layernorm(x, [8])
        torch.testing.assert_close(got, F.layer_norm(x, [8]))
        assert record.decisions[-1].kernel == "torch"


def test_core_layernorm_auto_on_unsupported_dtype_uses_pytorch() -> None:
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    got = fused_layernorm(x, [8])
    torch.testing.assert_close(got, F.layer_norm(x, [8]))
    assert xrt_torch.current_record().decisions[-1].kernel == "torch"


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm_weight = torch.nn.Parameter(torch.ones(16))
        self.norm_bias = torch.nn.Parameter(torch.zeros(16))
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = fused_layernorm(x, [16], self.norm_weight, self.norm_bias)
        q = self.proj(h).view(x.shape[0], x.shape[1], 2, 8).transpose(1, 2)
        return fused_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(x.shape)


def test_ops_work_under_torch_compile() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = _Block()
    x = torch.randn(2, 8, 16)
    eager = block(x)
    with xrt_torch.kernel_policy(attention="math", layernorm="cpu"):
        compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
        out = compiled(x)
        out.sum().backward()
    torch.testing.assert_close(out, eager)
    assert block.proj.weight.grad is not None


# Inductor imports torch.jit internals that warn about their own deprecation.
def test_ops_compile_with_inductor() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = _Block()
    x = torch.randn(2, 8, 16)
    with xrt_torch.kernel_policy(attention="math", layernorm="torch"):
        out = torch.compile(block, fullgraph=True)(x)
    torch.testing.assert_close(out, block(x))


def test_pinned_backend_never_touches_the_process_wide_sdpa_switches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pinned backend is called through its ATen entry point: a call that flipped the
    # SDPA switches (sdpa_kernel) around it would raise here.
    import torch.nn.attention

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("fused_attention toggled the process-wide SDPA switches")

    q, k, v = _qkv()
    with xrt_torch.kernel_policy(attention="math"):
        monkeypatch.setattr(torch.nn.attention, "sdpa_kernel", refuse)
        out = fused_attention(q, k, v, is_causal=True)
        out.sum().backward()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("masked", [False, True])
def test_cpu_flash_entry_point_matches_sdpa_with_its_own_backward(masked: bool) -> None:
    # PyTorch's CPU flash kernel through its entry point (what a lock recorded on a CPU
    # replays): output and gradients, from the log-sum-exp the forward kept.
    from xpuruntime.pytorch.ops import sdpa_entries

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 24, 16, requires_grad=True) for _ in range(3))
    mask = torch.rand(24, 24) > 0.3 if masked else None
    assert sdpa_entries.refusal("flash_v2", q, k, v, mask, 0.0, False, None, True) is None
    saved = sdpa_entries.forward("flash_v2", q, k, v, mask, 0.0, False, None, True)
    grad = torch.randn_like(saved[0])
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(saved[0], expected)
    grads = sdpa_entries.backward("flash_v2", grad, q, k, v, saved, mask, 0.0, False, None)
    for ours, theirs in zip(grads, torch.autograd.grad(expected, (q, k, v), grad), strict=True):
        torch.testing.assert_close(ours, theirs)
    # A backend that has no CPU entry point says so.
    reason = sdpa_entries.refusal("efficient", q, k, v, None, 0.0, False, None, False)
    assert reason is not None
    assert "runs on cuda" in reason or "no ATen entry point" in reason
