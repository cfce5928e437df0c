"""``fused_attention``: scaled dot-product attention on the kernel the policy names.

``xrt_flash`` runs xpuruntime's own Triton kernels (:mod:`.xrt_attention`). The other
kernels are PyTorch's own (FlashAttention-2, memory-efficient, cuDNN, math); the policy
decides which one may run. A kernel that cannot serve a call (not on this device, or PyTorch
refuses the inputs, with its reasons: PyTorch reports them as warnings before its "No
available kernel" error) follows the kernel fallback rule: pinned under ``fallback="error"``
it raises :class:`~xpuruntime.runtime.errors.UnsupportedOperationError`, otherwise the
fallback to PyTorch's own choice is warned or recorded. Under a decision lockfile
(``ExecutionPolicy(lock=...)``) the backend PyTorch selects is recorded per call signature,
and replayed as mode ``"locked"``: exactly the locked backend, a refusal going through the
policy's fallback mode.

Backward recomputes the attention on the same backend (as activation checkpointing does)
inside a second custom op, so both directions stay opaque, compile-friendly ops.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP, autograd_inside_kernel, restrict_sdpa
from xpuruntime.pytorch.lock import attention_kernel
from xpuruntime.pytorch.mapping import ATTENTION_BACKENDS
from xpuruntime.pytorch.ops import xrt_attention
from xpuruntime.pytorch.ops._policy import (
    describe,
    fall_back,
    off_device_reason,
    requested_kernel,
)

__all__ = ["fused_attention"]


@contextmanager
def _captured_warnings() -> Iterator[list[warnings.WarningMessage]]:
    # PyTorch explains why a backend cannot serve a call through warnings; catch them all
    # (a warnings-as-errors filter would otherwise turn the first one into the error).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _reemit(caught: list[warnings.WarningMessage]) -> None:
    for message in caught:
        warnings.warn_explicit(message.message, message.category, message.filename, message.lineno)


def _on_backend(kernel: str, mode: str, run: Callable[[], Any], example: Tensor) -> Any:
    """Run ``run`` with SDPA restricted to ``kernel``; if it cannot serve the call, apply the
    kernel fallback rule and run on any backend."""
    if kernel == "auto":
        policy.note_decision(
            "attention", "auto", "auto", "PyTorch's SDPA selection", **describe(example)
        )
        return run()
    backend, _ = ATTENTION_BACKENDS[kernel]
    # A locked backend is what PyTorch's selector chose for this signature when the lock was
    # recorded (on CPU tensors too: SDPBackend.FLASH_ATTENTION is also PyTorch's CPU kernel).
    # "recorded": PyTorch's own choice, noted into the lockfile being written.
    from_lock = mode in ("locked", "recorded")
    reason = None if from_lock else off_device_reason("attention", kernel, example)
    if reason is None:
        with _captured_warnings() as caught:
            try:
                with restrict_sdpa(backend):
                    result = run()
            except RuntimeError as error:
                result = None
                said = " | ".join([str(w.message) for w in caught] + [str(error)])
                reason = (
                    f"{backend.name} cannot serve this call (query {tuple(example.shape)} "
                    f"{example.dtype} on {example.device}); PyTorch says: {said}"
                )
        if result is not None:
            _reemit(caught)
            locked = mode == "locked"
            how = {"locked": ", replayed from the lockfile", "recorded": ", PyTorch's choice"}
            policy.note_decision(
                "attention",
                kernel,
                mode,
                f"SDPA restricted to {backend.name}{how.get(mode, '')}",
                status="locked" if locked else "decided",
                **describe(example),
            )
            return result
    assert reason is not None
    if from_lock:  # a locked (or just recorded) choice not honoured: the fallback mode
        policy.note_fallback(
            what="attention (locked)", requested=kernel, chosen="auto", reason=reason
        )
    else:
        fall_back("attention", kernel, mode, "auto", reason)  # raises for a pin under 'error'
    policy.note_decision(
        "attention",
        "auto",
        mode,
        f"fallback from {kernel}: {reason}",
        status="fallen_back",
        **describe(example),
    )
    # A pinned policy left only its backend enabled process-wide: let SDPA choose again.
    with restrict_sdpa(*(b for b, _ in ATTENTION_BACKENDS.values())):
        return run()


def _sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> Tensor:
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
    )


def _fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    kernel: str,
    mode: str,
) -> Tensor:
    def run() -> Tensor:
        return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)

    output: Tensor = _on_backend(kernel, mode, run, query)
    # One layout whatever the backend (flash returns a transposed view): the fake matches.
    return output.contiguous()


def _fused_attention_fake(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    kernel: str,
    mode: str,
) -> Tensor:
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def _fused_attention_backward(
    grad: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    is_causal: bool,
    scale: float | None,
    kernel: str,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor]:
    inputs = [tensor.detach().requires_grad_() for tensor in (query, key, value)]

    def run() -> tuple[Tensor, ...]:
        with autograd_inside_kernel():
            q, k, v = inputs
            output = _sdpa(q, k, v, attn_mask, 0.0, is_causal, scale)
            return torch.autograd.grad(output, inputs, grad)

    grads = _on_backend(kernel, mode, run, query)
    return tuple(  # type: ignore[return-value]
        g if g.stride() == t.stride() else torch.empty_like(t).copy_(g)
        for g, t in zip(grads, (query, key, value), strict=True)
    )


def _fused_attention_backward_fake(
    grad: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    is_causal: bool,
    scale: float | None,
    kernel: str,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    query, key, value, attn_mask, _dropout_p, is_causal, scale, kernel, mode = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.is_causal, ctx.scale, ctx.kernel, ctx.mode = is_causal, scale, kernel, mode


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    query, key, value, attn_mask = ctx.saved_tensors
    dq, dk, dv = torch.ops.xpuruntime.fused_attention_backward(
        grad, query, key, value, attn_mask, ctx.is_causal, ctx.scale, ctx.kernel, ctx.mode
    )
    return dq, dk, dv, None, None, None, None, None, None


if HAS_CUSTOM_OP:
    _forward_op = torch.library.custom_op(
        "xpuruntime::fused_attention", _fused_attention, mutates_args=()
    )
    _forward_op.register_fake(_fused_attention_fake)
    _forward_op.register_autograd(_backward, setup_context=_setup_context)
    _backward_op = torch.library.custom_op(
        "xpuruntime::fused_attention_backward", _fused_attention_backward, mutates_args=()
    )
    _backward_op.register_fake(_fused_attention_backward_fake)


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Fused multi-head attention, ``(batch, heads, seq, head_dim)`` in and out.

    Runs xpuruntime's own Triton kernels when the policy's ``attention`` entry is
    ``xrt_flash``; otherwise PyTorch's SDPA restricted to the backend the entry names
    (``flash_v2``, ``efficient``, ``cudnn``, ``math``), or PyTorch's own choice when the
    policy names none. ``scale`` defaults to ``1/sqrt(head_dim)``. With ``enable_gqa`` key and
    value may have fewer heads than the query (a divisor of them), as in SDPA.
    """
    kernel, mode = requested_kernel("attention")
    if kernel == xrt_attention.KERNEL:
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        reason = xrt_attention.call_unsupported(attn_mask, dropout_p, needs_grad)
        if not reason:
            return xrt_attention.xrt_flash_attention(query, key, value, is_causal, scale, mode)
        xrt_attention.refuse(reason, mode, query)
        kernel, mode = "auto", "auto"
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        # The SDPA backends get the key/value heads repeated, as SDPA's own enable_gqa does.
        group = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(group, -3), value.repeat_interleave(group, -3)
    if kernel not in ATTENTION_BACKENDS and kernel != "auto":
        kernel = "auto"  # "torch": PyTorch's own selection, same as no policy
    kernel, mode = attention_kernel(
        kernel, mode, query, key, value, attn_mask, dropout_p, is_causal, scale
    )
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if (dropout_p > 0.0 and needs_grad) or not HAS_CUSTOM_OP:
        # Recomputing in backward would draw a different dropout mask; PyTorch's own
        # autograd keeps the RNG state, so train-time dropout runs SDPA directly (as does
        # PyTorch < 2.4, which has no torch.library.custom_op).
        def run() -> Tensor:
            return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)

        result: Tensor = _on_backend(kernel, mode, run, query)
        return result
    return torch.ops.xpuruntime.fused_attention(  # type: ignore[no-any-return]
        query, key, value, attn_mask, float(dropout_p), is_causal, scale, kernel, mode
    )
