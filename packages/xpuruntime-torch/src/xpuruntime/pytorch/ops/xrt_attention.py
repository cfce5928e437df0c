"""``xrt_flash`` in PyTorch: the core's Triton attention kernels as differentiable custom ops.

:func:`~xpuruntime.pytorch.ops.fused_attention` runs these when the policy's ``attention``
entry names ``xrt_flash``. The forward op returns the output and the log-sum-exp, which autograd
saves for the backward op (dq, dk, dv from the core's backward kernels; no recomputation of
the forward). Whether the kernel can serve a call is decided inside the ops, at run time, so
``torch.compile(fullgraph=True)`` traces one opaque op either way; the fake implementations
give the output shapes. Launches allocate through PyTorch's caching allocator on the current
stream, so the ops can be captured in CUDA graphs (after a first, compiling call).

An ``xrt_flash`` that cannot serve a call follows the kernel fallback rule: pinned under
``fallback="error"`` it raises :class:`~xpuruntime.runtime.errors.UnsupportedOperationError`
with the reason; otherwise it falls back to PyTorch's own SDPA, warned or recorded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.kernels.attention import KERNEL
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP, autograd_inside_kernel
from xpuruntime.pytorch.ops import _core_kernels
from xpuruntime.pytorch.ops._policy import describe, fall_back

__all__ = ["KERNEL", "call_unsupported", "refuse", "xrt_flash_attention"]


def call_unsupported(attn_mask: Tensor | None, dropout_p: float, needs_grad: bool) -> str:
    """Why ``xrt_flash`` cannot serve a call for reasons outside the tensors' shapes ('' if none)."""
    if attn_mask is not None:
        return "xrt_flash takes no attn_mask (use is_causal, or another kernel)"
    if dropout_p > 0.0 and needs_grad:
        return "xrt_flash has no attention dropout"
    if not HAS_CUSTOM_OP:
        return "xrt_flash's autograd needs torch.library.custom_op (PyTorch 2.4 or newer)"
    return ""


def refuse(reason: str, mode: str, example: Tensor) -> None:
    """``xrt_flash`` cannot serve this call: the kernel fallback rule (a pin under
    fallback='error' raises UnsupportedOperationError; otherwise the fallback to PyTorch's
    SDPA is warned or recorded)."""
    fall_back(
        "attention",
        KERNEL,
        mode,
        "torch",
        f"{reason} (query {tuple(example.shape)} {example.dtype} on {example.device})",
    )
    policy.note_decision(
        "attention", "torch", mode, f"fallback from {KERNEL}: {reason}", **describe(example)
    )


def _sdpa(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None
) -> Tensor:
    if key.shape[1] != query.shape[1]:  # grouped-query: PyTorch's SDPA repeats the heads
        group = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale)


def _lse_shape(query: Tensor) -> tuple[int, int, int]:
    return (query.shape[0], query.shape[1], query.shape[2])


def _forward(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None, mode: str
) -> tuple[Tensor, Tensor]:
    reason = _core_kernels.attention_unsupported(query, key, is_causal)
    if not reason:
        out, lse, detail = _core_kernels.attention_forward(query, key, value, is_causal, scale)
        policy.note_decision(
            "attention", KERNEL, mode, f"xpuruntime's Triton kernels; {detail}", **describe(query)
        )
        return out, lse
    refuse(reason, mode, query)
    out = _sdpa(query, key, value, is_causal, scale).contiguous()
    # PyTorch's SDPA does not return it; the fallback backward recomputes instead.
    return out, query.new_full(_lse_shape(query), float("nan"), dtype=torch.float32)


def _forward_fake(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None, mode: str
) -> tuple[Tensor, Tensor]:
    return torch.empty_like(query, memory_format=torch.contiguous_format), query.new_empty(
        _lse_shape(query), dtype=torch.float32
    )


def _backward(
    grad: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    is_causal: bool,
    scale: float | None,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor]:
    if not _core_kernels.attention_unsupported(query, key, is_causal):
        dq, dk, dv, _ = _core_kernels.attention_backward(
            grad, query, key, value, out, lse, is_causal, scale
        )
        return dq, dk, dv
    # The forward fell back (prefer): differentiate PyTorch's SDPA by recomputing it.
    inputs = [tensor.detach().requires_grad_() for tensor in (query, key, value)]
    with autograd_inside_kernel():
        output = _sdpa(inputs[0], inputs[1], inputs[2], is_causal, scale)
        grads = torch.autograd.grad(output, inputs, grad)
    return tuple(g.contiguous() for g in grads)  # type: ignore[return-value]


def _backward_fake(
    grad: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    is_causal: bool,
    scale: float | None,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(  # type: ignore[return-value]
        torch.empty_like(t, memory_format=torch.contiguous_format) for t in (query, key, value)
    )


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    query, key, value, is_causal, scale, mode = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.is_causal, ctx.scale, ctx.mode = is_causal, scale, mode
    # The log-sum-exp gets no gradient: without this autograd would fill a zero tensor for
    # it on every backward (an elementwise kernel the training step does not need).
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _autograd_backward(
    ctx: Any, grad: Tensor | None, _grad_lse: Tensor | None
) -> tuple[Tensor | None, ...]:
    if grad is None:  # the output took no part in the loss
        return None, None, None, None, None, None
    query, key, value, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.xpuruntime.xrt_flash_attention_backward(
        grad.contiguous(), query, key, value, out, lse, ctx.is_causal, ctx.scale, ctx.mode
    )
    return dq, dk, dv, None, None, None


if HAS_CUSTOM_OP:
    _forward_op = torch.library.custom_op(
        "xpuruntime::xrt_flash_attention", _forward, mutates_args=()
    )
    _forward_op.register_fake(_forward_fake)
    _forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)
    _backward_op = torch.library.custom_op(
        "xpuruntime::xrt_flash_attention_backward", _backward, mutates_args=()
    )
    _backward_op.register_fake(_backward_fake)


def xrt_flash_attention(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None, mode: str
) -> Tensor:
    """The output of the ``xrt_flash`` custom op on (batch, heads, seq, head_dim) tensors;
    key/value may have fewer heads (grouped-query attention)."""
    out, _lse = torch.ops.xpuruntime.xrt_flash_attention(
        query, key, value, is_causal, None if scale is None else float(scale), mode
    )
    return out  # type: ignore[no-any-return]
