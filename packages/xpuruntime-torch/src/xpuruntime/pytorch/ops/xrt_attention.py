"""``xrt_flash`` in PyTorch: the core's attention kernels as differentiable custom ops.

:func:`~xpuruntime.pytorch.ops.fused_attention` runs these when the policy's ``attention``
entry names ``xrt_flash`` (the Triton kernels) or ``xrt_flash_hopper`` (the Gluon Hopper
kernels; the op's ``requested`` argument, default ``xrt_flash``: not ``kernel``, a name
inductor's fallback lowering takes for itself). The forward op returns the output
and the log-sum-exp, which autograd saves for the backward op with the kernel (dq, dk, dv from
the core's Triton backward kernels, or after ``xrt_flash_hopper`` its Gluon Hopper backward
where that takes the call: both forwards' log-sum-exp feeds either; no recomputation of the
forward). Whether the kernel can serve a call is decided inside the ops, at run time, so
``torch.compile(fullgraph=True)`` traces one opaque op either way; the fake implementations
give the output shapes. Launches allocate through PyTorch's caching allocator on the current
stream, so the ops can be captured in CUDA graphs (after a first, compiling call).

A kernel that cannot serve a call follows the kernel fallback rule: pinned under
``fallback="error"`` it raises :class:`~xpuruntime.runtime.errors.UnsupportedOperationError`
with the reason; otherwise it falls back to PyTorch's own SDPA, warned or recorded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.kernels.attention import HOPPER_KERNEL, KERNEL
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP, autograd_inside_kernel
from xpuruntime.pytorch.ops import _core_kernels
from xpuruntime.pytorch.ops._policy import describe, fall_back

__all__ = ["KERNELS", "call_unsupported", "refuse", "xrt_flash_attention"]

#: The policy's attention kernels these ops run, and what the record calls each.
KERNELS = {
    KERNEL: "xpuruntime's Triton kernels",
    HOPPER_KERNEL: "xpuruntime's Gluon Hopper kernels (the detail names the backward's)",
}


def call_unsupported(
    kernel: str, attn_mask: Tensor | None, dropout_p: float, needs_grad: bool
) -> str:
    """Why ``kernel`` cannot serve a call for reasons outside the tensors' shapes ('' if none)."""
    if attn_mask is not None:
        return f"{kernel} takes no attn_mask (use is_causal, or another kernel)"
    if dropout_p > 0.0 and needs_grad:
        return f"{kernel} has no attention dropout"
    if not HAS_CUSTOM_OP:
        return f"{kernel}'s autograd needs torch.library.custom_op (PyTorch 2.4 or newer)"
    return ""


def refuse(kernel: str, reason: str, mode: str, example: Tensor) -> None:
    """``kernel`` cannot serve this call: the kernel fallback rule (a pin under
    fallback='error' raises UnsupportedOperationError; otherwise the fallback to PyTorch's
    SDPA is warned or recorded)."""
    fall_back(
        "attention",
        kernel,
        mode,
        "torch",
        f"{reason} (query {tuple(example.shape)} {example.dtype} on {example.device})",
    )
    policy.note_decision(
        "attention", "torch", mode, f"fallback from {kernel}: {reason}", **describe(example)
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
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    scale: float | None,
    mode: str,
    requested: str = KERNEL,
) -> tuple[Tensor, Tensor]:
    chosen, reason = _core_kernels.attention_kernel(query, key, is_causal, requested)
    if chosen:
        out, lse, detail = _core_kernels.attention_forward(
            query, key, value, is_causal, scale, chosen
        )
        policy.note_decision(
            "attention", chosen, mode, f"{KERNELS[chosen]}; {detail}", **describe(query)
        )
        return out, lse
    refuse(requested, reason, mode, query)
    out = _sdpa(query, key, value, is_causal, scale).contiguous()
    # PyTorch's SDPA does not return it; the fallback backward recomputes instead.
    return out, query.new_full(_lse_shape(query), float("nan"), dtype=torch.float32)


def _forward_fake(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    scale: float | None,
    mode: str,
    requested: str = KERNEL,
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
    requested: str = KERNEL,
) -> tuple[Tensor, Tensor, Tensor]:
    chosen, _ = _core_kernels.attention_kernel(query, key, is_causal, requested)
    if chosen:  # the forward ran ``chosen``: its backward on its log-sum-exp
        dq, dk, dv, _ = _core_kernels.attention_backward(
            grad, query, key, value, out, lse, is_causal, scale, chosen
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
    requested: str = KERNEL,
) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(  # type: ignore[return-value]
        torch.empty_like(t, memory_format=torch.contiguous_format) for t in (query, key, value)
    )


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    query, key, value, is_causal, scale, mode, requested = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.is_causal, ctx.scale, ctx.mode, ctx.requested = is_causal, scale, mode, requested
    # The log-sum-exp gets no gradient: without this autograd would fill a zero tensor for
    # it on every backward (an elementwise kernel the training step does not need).
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _autograd_backward(
    ctx: Any, grad: Tensor | None, _grad_lse: Tensor | None
) -> tuple[Tensor | None, ...]:
    if grad is None:  # the output took no part in the loss
        return None, None, None, None, None, None, None
    query, key, value, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.xpuruntime.xrt_flash_attention_backward(
        grad.contiguous(), query, key, value, out, lse, ctx.is_causal, ctx.scale, ctx.mode,
        ctx.requested,
    )  # fmt: skip
    return dq, dk, dv, None, None, None, None


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
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool,
    scale: float | None,
    mode: str,
    kernel: str = KERNEL,
) -> Tensor:
    """The output of the ``xrt_flash`` custom op running ``kernel`` (``xrt_flash`` or
    ``xrt_flash_hopper``) on (batch, heads, seq, head_dim) tensors; key/value may have fewer
    heads (grouped-query attention)."""
    out, _lse = torch.ops.xpuruntime.xrt_flash_attention(
        query, key, value, is_causal, None if scale is None else float(scale), mode, kernel
    )
    return out  # type: ignore[no-any-return]
