"""``fused_attention``: scaled dot-product attention on the kernel the policy names.

``xrt_flash`` runs xpuruntime's own Triton kernels, ``xrt_flash_hopper`` its Gluon Hopper
forward with the Triton backward (:mod:`.xrt_attention`). ``flash_v2``,
``efficient`` and ``cudnn`` are PyTorch's own backends, called through their ATen entry
points (:mod:`.sdpa_entries`): no process-wide SDPA switch is touched, and training runs the
backend's own backward on the log-sum-exp its forward kept. ``math`` is PyTorch's math
backend through its entry point (differentiable as it is). With no policy entry PyTorch's
SDPA chooses. A backend that cannot serve a call (PyTorch's own check says why) follows the
kernel fallback rule: pinned under ``fallback="error"`` it raises
:class:`~xpuruntime.runtime.errors.UnsupportedOperationError`, otherwise the fallback to
PyTorch's own choice is warned or recorded. Under a decision lockfile
(``ExecutionPolicy(lock=...)``) the backend PyTorch selects is recorded per call signature,
and replayed as mode ``"locked"``: exactly the locked backend, a refusal going through the
policy's fallback mode.

The ops ``xpuruntime::fused_attention`` and ``fused_attention_backward`` and their autograd
node are C++ (``csrc/attention_ops.cpp``), as are the entry-point calls. What stays here is
the policy surface: the kernel choice, made and recorded on the first call of its kind under
the policy in effect (PyTorch's own eligibility check, once per call signature), the
fallback rule, and the kernels that are not an entry point (math and PyTorch's own choice,
which the native kernels hand back to this module). A plain eager call served by an entry
point or by PyTorch's own selection then runs no Python: :func:`fused_attention` is itself a
C function (whether anything intercepts the call, whether it needs grad, the lookup of its
signature under the policy state in effect, and the kernel), whose every other call runs the
Python function below, which ``torch.compile`` and ``torch.export`` trace in its place
(``torch.compiler.substitute_in_graph``). Eager calls are differentiated by PyTorch's own
autograd (the backend's own backward, as under SDPA). Compiled and traced calls go through
the op, which resolves the kernel itself (opaque to the tracer) and returns the output with
what the backward needs (log-sum-exp and the dropout RNG state; empty where the kernel keeps
none, and then its backward op recomputes the forward under autograd). The fake kernels are
registered here (``register_fake``): the results' layouts depend on the device, which a C++
Meta kernel's tensors do not carry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.pytorch import _state, policy
from xpuruntime.pytorch._compat import (
    HAS_CUSTOM_OP,
    HAS_SUBSTITUTE_IN_GRAPH,
    autograd_inside_kernel,
    restrict_sdpa,
)
from xpuruntime.pytorch.lock import attention_kernel
from xpuruntime.pytorch.mapping import ATTENTION_BACKENDS
from xpuruntime.pytorch.ops import sdpa_entries, xrt_attention
from xpuruntime.pytorch.ops._eager import plain_eager, trace_in_place_of
from xpuruntime.pytorch.ops._native import native
from xpuruntime.pytorch.ops._policy import (
    describe,
    fall_back,
    note_call,
    off_device_reason,
    requested_kernel,
)
from xpuruntime.runtime.record import DecisionStatus

__all__ = ["fused_attention"]

_HOW = {
    "locked": ", replayed from the lockfile",
    "recorded": ", PyTorch's choice",
}


def _sdpa(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
          dropout_p: float, is_causal: bool, scale: float | None) -> Tensor:  # fmt: skip
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
        scale=scale,
    )  # fmt: skip


# What runs after a fallback: PyTorch's SDPA choosing among all its backends. A pinned
# policy left only its backend enabled process-wide (for plain SDPA calls elsewhere), so this
# one path re-enables them around the call; the pinned path never touches the switches.
_FALLBACK = "fallback"


def _sdpa_any(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
              dropout_p: float, is_causal: bool, scale: float | None) -> Tensor:  # fmt: skip
    with restrict_sdpa(*(backend for backend, _ in ATTENTION_BACKENDS.values())):
        return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)


def _refusal(kernel: str, mode: str, query: Tensor, key: Tensor, value: Tensor,
             attn_mask: Tensor | None, dropout_p: float, is_causal: bool, scale: float | None,
             needs_grad: bool) -> str | None:  # fmt: skip
    """Why ``kernel`` cannot serve this call, or None. Metadata only: fakes agree."""
    if kernel == "auto":
        return None
    # A locked backend is what PyTorch's selector chose for this signature when the lock was
    # recorded (on CPU tensors too: SDPBackend.FLASH_ATTENTION is also PyTorch's CPU kernel).
    if mode not in ("locked", "recorded"):
        reason = off_device_reason("attention", kernel, query)
        if reason is not None:
            return reason
    if kernel == "math":
        return None
    return sdpa_entries.refusal(
        kernel, query, key, value, attn_mask, dropout_p, is_causal, scale, needs_grad
    )


def _served_by(kernel: str, mode: str, query: Tensor, key: Tensor, value: Tensor,
               attn_mask: Tensor | None, dropout_p: float, is_causal: bool,
               scale: float | None, needs_grad: bool) -> str:  # fmt: skip
    """What :func:`_resolve` chose for this call, without recording anything: the fakes and
    the backward op ask it."""
    refused = _refusal(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal, scale,
                       needs_grad)  # fmt: skip
    return kernel if refused is None else _FALLBACK


def _resolve(kernel: str, mode: str, query: Tensor, key: Tensor, value: Tensor,
             attn_mask: Tensor | None, dropout_p: float, is_causal: bool, scale: float | None,
             needs_grad: bool) -> str:  # fmt: skip
    """The kernel that runs this call ("auto": PyTorch's SDPA), its decision recorded; a
    backend that cannot serve it goes through the kernel fallback rule (then ``_FALLBACK``)."""
    reason = _refusal(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal, scale,
                      needs_grad)  # fmt: skip
    if reason is None:
        if kernel == "auto":
            note_call("attention", "auto", "auto", "PyTorch's SDPA selection", query)
        else:
            how = "ATen entry point" + _HOW.get(mode, "")
            status: DecisionStatus = "locked" if mode == "locked" else "decided"
            note_call("attention", kernel, mode, f"{kernel} through its {how}", query, status)
        return kernel
    if mode in ("locked", "recorded"):  # a locked (or just recorded) choice not honoured
        policy.note_fallback(
            what="attention (locked)", requested=kernel, chosen="auto", reason=reason
        )
    else:
        fall_back("attention", kernel, mode, "auto", reason)  # raises for a pin under 'error'
    policy.note_decision(
        "attention", "auto", mode, f"fallback from {kernel}: {reason}", status="fallen_back",
        **describe(query),
    )  # fmt: skip
    return _FALLBACK


def _nothing_kept(query: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The op's (log-sum-exp, seed, offset) when the kernel keeps none: distinct empty
    tensors, since a custom op's outputs may not alias one another."""
    return query.new_empty(0), query.new_empty(0), query.new_empty(0)


def _choose(record: bool, kernel: str, mode: str, query: Tensor, key: Tensor, value: Tensor,
            attn_mask: Tensor | None, dropout_p: float, is_causal: bool, scale: float | None,
            needs_grad: bool) -> str:  # fmt: skip
    """The native op kernels' question: which kernel runs this call (recorded when the
    forward asks; the backward asks again without recording)."""
    decide = _resolve if record else _served_by
    return decide(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal, scale,
                  needs_grad)  # fmt: skip


def _forward_other(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
                   dropout_p: float, is_causal: bool, scale: float | None, kernel: str,
                   need_lse: bool) -> sdpa_entries.Saved:  # fmt: skip
    """The op's results for a kernel with no ATen entry point (math, PyTorch's own choice):
    the output, and empty tensors for what the backward would need, which recomputes."""
    if kernel == "math":
        out = sdpa_entries.math_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                          scale)  # fmt: skip
    else:
        run = _sdpa_any if kernel == _FALLBACK else _sdpa
        out = run(query, key, value, attn_mask, dropout_p, is_causal, scale)
    # One layout (the fake's) whatever PyTorch chose.
    return (out.contiguous(), *_nothing_kept(query))


def _backward_other(grad: Tensor, query: Tensor, key: Tensor, value: Tensor,
                    saved: sdpa_entries.Saved, attn_mask: Tensor | None, dropout_p: float,
                    is_causal: bool, scale: float | None,
                    kernel: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The backward op for math / PyTorch's choice: the forward recomputed under autograd (as
    activation checkpointing does)."""
    inputs = [tensor.detach().requires_grad_() for tensor in (query, key, value)]
    with autograd_inside_kernel():
        q, k, v = inputs
        if kernel == "math":
            out = sdpa_entries.math_attention(q, k, v, attn_mask, 0.0, is_causal, scale)
        else:
            run = _sdpa_any if kernel == _FALLBACK else _sdpa
            out = run(q, k, v, attn_mask, 0.0, is_causal, scale)
        grads = torch.autograd.grad(out, inputs, grad)
    # In the inputs' layouts, as the fake (empty_like) promises.
    dq, dk, dv = (
        g if g.stride() == t.stride() else torch.empty_like(t).copy_(g)
        for g, t in zip(grads, (query, key, value), strict=True)
    )
    return dq, dk, dv


native.set_attention_hooks(_choose, _forward_other, _backward_other)


# ---------------------------------------------------------------------------------------
# The ops' fake kernels (torch.compile, tracing), and the eager fast path.


def _fused_attention_fake(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
                          dropout_p: float, is_causal: bool, scale: float | None, kernel: str,
                          mode: str, need_lse: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    chosen = _served_by(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal,
                        scale, need_lse)  # fmt: skip
    if chosen in sdpa_entries.ENTRY_CODES:  # the entry points' own meta kernels
        return sdpa_entries.forward(
            chosen, query, key, value, attn_mask, dropout_p, is_causal, scale, need_lse
        )
    out = query.new_empty((*query.shape[:-1], value.shape[-1]))
    return (out, *_nothing_kept(query))


def _fused_attention_backward_fake(grad: Tensor, query: Tensor, key: Tensor, value: Tensor,
                                   out: Tensor, lse: Tensor, seed: Tensor, offset: Tensor,
                                   attn_mask: Tensor | None, dropout_p: float,
                                   is_causal: bool, scale: float | None, kernel: str,
                                   mode: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    chosen = _served_by(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal,
                        scale, True)  # fmt: skip
    if chosen in sdpa_entries.ENTRY_CODES:
        return sdpa_entries.backward(chosen, grad, query, key, value, (out, lse, seed, offset),
                                     attn_mask, dropout_p, is_causal, scale)  # fmt: skip
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


if HAS_CUSTOM_OP:  # register_fake came with custom_op (PyTorch 2.4)
    torch.library.register_fake("xpuruntime::fused_attention")(_fused_attention_fake)
    torch.library.register_fake("xpuruntime::fused_attention_backward")(
        _fused_attention_backward_fake
    )


_Function = TypeVar("_Function", bound=Callable[..., Tensor])


def _in_cpp(function: _Function) -> _Function:
    """``function`` as a C function (``csrc/attention_ops.cpp``) that runs a call of a kind
    decided before under the policy in effect without a Python frame (the checks that nothing
    intercepts it, whether it needs grad, one lookup, the kernel), and ``function`` for every
    other call; ``torch.compile`` traces ``function`` in its place. It keeps ``function``'s
    signature (as its ``__text_signature__``) and docstring. On a PyTorch without
    ``torch.compiler.substitute_in_graph`` (before 2.5) dynamo could not trace the C function,
    so ``function`` stays the op and runs every call (the same results, at the Python
    path's host time)."""
    if not HAS_SUBSTITUTE_IN_GRAPH:
        return function
    signature = inspect.signature(function)
    untyped = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    doc = f"{function.__name__}{untyped}\n--\n\n{inspect.getdoc(function)}"
    # The policy state in effect, read by the C function as that module's global.
    entry = native.attention_entry(
        function, vars(_state), "_state", list(signature.parameters), doc
    )
    trace_in_place_of(entry, function)
    return cast(_Function, entry)


@_in_cpp
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
    ``xrt_flash``, its Hopper forward (and the Triton backward) under ``xrt_flash_hopper``;
    PyTorch's backend the entry names (``flash_v2``, ``efficient``,
    ``cudnn``, ``math``) through its own ATen entry point; or PyTorch's own choice when the
    policy names none. ``scale`` defaults to ``1/sqrt(head_dim)``. With ``enable_gqa`` key and
    value may have fewer heads than the query (a divisor of them), as in SDPA.
    """
    kernel, mode = requested_kernel("attention")
    needs_grad = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
    )
    if kernel in xrt_attention.KERNELS:
        reason = xrt_attention.call_unsupported(kernel, attn_mask, dropout_p, needs_grad)
        if not reason:
            return xrt_attention.xrt_flash_attention(
                query, key, value, is_causal, scale, mode, kernel
            )
        xrt_attention.refuse(kernel, reason, mode, query)
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
    eager = plain_eager(query, key, value, attn_mask)
    if not eager and not (dropout_p > 0.0 and needs_grad):
        # Compiling or tracing: the op resolves the kernel itself, opaque to the tracer.
        return torch.ops.xpuruntime.fused_attention(  # type: ignore[no-any-return]
            query, key, value, attn_mask, float(dropout_p), is_causal, scale, kernel, mode,
            needs_grad,
        )[0]  # fmt: skip
    chosen = _resolve(kernel, mode, query, key, value, attn_mask, dropout_p, is_causal, scale,
                      needs_grad)  # fmt: skip
    code = sdpa_entries.ENTRY_CODES.get(chosen)
    if code is not None:
        if not eager:  # training with dropout, traced: the op keeps the RNG state
            return torch.ops.xpuruntime.fused_attention(  # type: ignore[no-any-return]
                query, key, value, attn_mask, float(dropout_p), is_causal, scale, chosen,
                mode, needs_grad,
            )[0]  # fmt: skip
        # The entry points are differentiable ATen ops: PyTorch's autograd runs the backend's
        # own backward (in C++, as under SDPA) on what the forward kept. Only a call its own
        # backend serves is remembered: a refusal goes through the fallback rule every time.
        return native.attention_decided(  # type: ignore[no-any-return]
            _state.current(), query, key, value, attn_mask, dropout_p, is_causal, scale,
            needs_grad, code,
        )  # fmt: skip
    if chosen == "auto" and eager:
        # PyTorch's own selection (SDPA, as F.scaled_dot_product_attention calls it).
        return native.attention_decided(  # type: ignore[no-any-return]
            _state.current(), query, key, value, attn_mask, dropout_p, is_causal, scale,
            needs_grad, native.ATTENTION_SDPA,
        )  # fmt: skip
    # math / a fallback to PyTorch's choice, differentiated by PyTorch's own autograd (which
    # keeps the dropout RNG state a recomputation would lose).
    if chosen == "math":
        return sdpa_entries.math_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale
        )
    run = _sdpa_any if chosen == _FALLBACK else _sdpa
    return run(query, key, value, attn_mask, dropout_p, is_causal, scale)
