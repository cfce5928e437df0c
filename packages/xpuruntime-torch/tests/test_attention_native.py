"""fused_attention's native op on PyTorch's CPU flash kernel (the backend a lock replays on a
CPU): the C++ kernels and autograd node, opcheck, torch.compile, and the eager fast path
with its decision record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.pytorch.ops import fused_attention

LOCKED = ("flash_v2", "locked")


def _qkv() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(2, 3, 24, 16, requires_grad=True) for _ in range(3))


def _op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
        is_causal: bool = True) -> tuple[torch.Tensor, ...]:  # fmt: skip
    out: tuple[torch.Tensor, ...] = torch.ops.xpuruntime.fused_attention(
        q, k, v, mask, 0.0, is_causal, None, *LOCKED, True
    )
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_op_on_cpu_flash_passes_opcheck(masked: bool) -> None:
    q, k, v = _qkv()
    mask = torch.rand(24, 24) > 0.3 if masked else None
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_attention.default,
        (q, k, v, mask, 0.0, False, None, *LOCKED, True),
    )


def test_op_is_a_cpp_autograd_node_running_the_backends_backward() -> None:
    q, k, v = _qkv()
    out, lse, seed, offset = _op(q, k, v)
    assert type(out.grad_fn).__name__ == "CppFunction"
    # The CPU flash kernel keeps its log-sum-exp (not differentiable) and no RNG state.
    assert lse.shape == (2, 24, 3) or lse.shape == (2, 3, 24)
    assert not lse.requires_grad
    assert seed.numel() == 0
    assert offset.numel() == 0
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(expected, (q, k, v), grad)
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want)


def test_op_compiles_with_fullgraph_and_its_backward_op() -> None:
    torch._dynamo.reset()
    q, k, v = _qkv()
    mask = torch.rand(24, 24) > 0.3

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _op(q, k, v, mask, is_causal=False)[0]

    out = torch.compile(step, backend="aot_eager", fullgraph=True)(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected)
    ours = torch.autograd.grad(out.sum(), (q, k, v))
    theirs = torch.autograd.grad(expected.sum(), (q, k, v))
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want)


def test_replayed_lock_runs_the_native_entry_and_records_once(tmp_path: Path) -> None:
    lock = str(tmp_path / "training.lock.json")
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(lock="record", lock_file=lock)):
        fused_attention(q, q, q)
    replay = ExecutionPolicy(lock="replay", lock_file=lock, fallback="error")
    with xrt_torch.kernel_policy(exec_policy=replay) as record:
        outputs = [fused_attention(q, q, q) for _ in range(3)]
    # One decision for the three calls (the lock's switch group is recorded apart, shapeless).
    decisions = [(d.kernel, d.status) for d in record.decisions if d.op == "attention" and d.shape]
    assert decisions == [LOCKED]
    # The eager path: PyTorch's own autograd node of the entry point, as under SDPA.
    assert "FlashAttentionForCpu" in type(outputs[-1].grad_fn).__name__
    expected = F.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(outputs[-1], expected)
    (ours,) = torch.autograd.grad(outputs[-1].sum(), q)
    (theirs,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(ours, theirs)


def test_eager_calls_under_no_attention_entry_run_sdpa_from_cpp_and_record_once() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy()) as record:
        outputs = [fused_attention(q, q, q, is_causal=True) for _ in range(3)]
    decisions = [(d.kernel, d.mode) for d in record.decisions if d.op == "attention"]
    assert decisions == [("auto", "auto")]
    expected = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    # SDPA's own selection, with its own autograd node.
    assert type(outputs[-1].grad_fn) is type(expected.grad_fn)
    torch.testing.assert_close(outputs[-1], expected)
    (ours,) = torch.autograd.grad(outputs[-1].sum(), q)
    (theirs,) = torch.autograd.grad(expected.sum(), q)
    torch.testing.assert_close(ours, theirs)


class _Seen(TorchDispatchMode):
    """Names the ops that reach the dispatcher's Python key."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


def test_eager_fast_path_yields_to_what_intercepts_the_call() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 32)
    replay = ExecutionPolicy()
    with xrt_torch.kernel_policy(exec_policy=replay):
        expected = fused_attention(q, q, q)  # decided: later plain calls take the fast path
        with _Seen() as seen:
            out = fused_attention(q, q, q)
        # A dispatch mode sees the op itself, not the kernel it resolves to.
        assert seen.ops[0].startswith("xpuruntime.fused_attention")
        torch.testing.assert_close(out, expected)
        sub = q.as_subclass(_Subclass)
        with _Seen() as seen:
            out = fused_attention(sub, sub, sub)
        assert seen.ops[0].startswith("xpuruntime.fused_attention")
        torch.testing.assert_close(out.as_subclass(torch.Tensor), expected)
        batched = torch.func.vmap(lambda t: fused_attention(t, t, t))(q.unsqueeze(0))
        torch.testing.assert_close(batched[0], expected)
