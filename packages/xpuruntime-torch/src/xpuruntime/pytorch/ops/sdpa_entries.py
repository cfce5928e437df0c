"""PyTorch's SDPA backends called through their own ATen entry points.

``F.scaled_dot_product_attention`` picks its backend from process-wide switches, so running
one named backend through it means flipping those switches around every call: slow, and
visible to every other thread. Here each backend is called directly, the way SDPA itself
calls it once it has chosen: FlashAttention-2 (``flash_v2``; PyTorch's CPU flash kernel for
CPU tensors), memory-efficient (``efficient``) and cuDNN (``cudnn``). The calls, with the
input preparation SDPA does before calling a backend (head dims padded to a multiple of 8
for flash, boolean masks turned additive and expanded for the mask-taking backends, with the
memory-efficient kernel's 16-element alignment of the mask's rows), are C++
(``csrc/attention_ops.cpp``); this module keeps the question of which backend may serve a
call.

Whether a backend can serve a call is PyTorch's own check (``torch.backends.cuda.can_use_*``;
on the CPU, PyTorch's selector), asked once per call signature; the reasons for a refusal
are PyTorch's words.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.pytorch._compat import SDPBackend, restrict_sdpa
from xpuruntime.pytorch.mapping import ATTENTION_BACKENDS
from xpuruntime.pytorch.ops._native import native

__all__ = [
    "ENTRY_CODES",
    "Saved",
    "backward",
    "forward",
    "math_attention",
    "refusal",
]

#: The kernels with an ATen entry point (the ``attention`` vocabulary's PyTorch backends less
#: math, which is differentiable as it is and runs through
#: ``aten._scaled_dot_product_attention_math``), as the native functions number them.
ENTRY_CODES = {
    "flash_v2": int(native.ATTENTION_FLASH),
    "efficient": int(native.ATTENTION_EFFICIENT),
    "cudnn": int(native.ATTENTION_CUDNN),
}

#: (output, log-sum-exp, RNG seed, RNG offset): the forward's results the backward needs.
Saved = tuple[Tensor, Tensor, Tensor, Tensor]

_aten = torch.ops.aten

# The (kernel, device type) pairs with an entry point (the native ops are built against this
# PyTorch, which has them all).
_ENTRY_DEVICES = frozenset({("flash_v2", "cuda"), ("flash_v2", "cpu"), ("efficient", "cuda"),
                            ("cudnn", "cuda")})  # fmt: skip

# kernel -> the name of PyTorch's eligibility check in torch.backends.cuda.
_CUDA_CHECKS = {
    "flash_v2": "can_use_flash_attention",
    "efficient": "can_use_efficient_attention",
    "cudnn": "can_use_cudnn_attention",
}


# ---------------------------------------------------------------------------------------
# Eligibility


def _sdpa_params(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                 is_causal: bool) -> Any:  # fmt: skip
    params: Any = torch.backends.cuda.SDPAParams  # 7 arguments from 2.5, 6 before
    try:
        return params(q, k, v, mask, dropout_p, is_causal, False)  # 2.5+: enable_gqa
    except TypeError:
        return params(q, k, v, mask, dropout_p, is_causal)


def _pytorch_words(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                   dropout_p: float, is_causal: bool) -> str:  # fmt: skip
    """PyTorch's own reasons for refusing ``kernel`` here. Its check functions print them to
    the process's stderr, out of Python's reach; SDPA restricted to the backend reports the
    same reasons as warnings before it raises, so that runs once per refused signature (and
    never for fake tensors, which only need the yes or no)."""
    if torch._C._len_torch_dispatch_stack() or type(q) is not torch.Tensor:
        return "(not asked: traced call)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad(), restrict_sdpa(ATTENTION_BACKENDS[kernel][0]):
                F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
                )
            error = ""
        except RuntimeError as raised:
            error = str(raised).splitlines()[0]
    return " | ".join([str(w.message) for w in caught] + ([error] if error else []))


def _cuda_refusal(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                  dropout_p: float, is_causal: bool) -> str | None:  # fmt: skip
    check = getattr(torch.backends.cuda, _CUDA_CHECKS[kernel], None)
    if check is None:
        return f"PyTorch {torch.__version__} has no {_CUDA_CHECKS[kernel]}"
    if check(_sdpa_params(q, k, v, mask, dropout_p, is_causal)):
        return None
    said = _pytorch_words(kernel, q, k, v, mask, dropout_p, is_causal) or "no reason given"
    return f"PyTorch's {_CUDA_CHECKS[kernel]} refuses this call; PyTorch says: {said}"


def _cpu_refusal(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                 dropout_p: float, is_causal: bool, scale: float | None) -> str | None:  # fmt: skip
    if kernel != "flash_v2":
        return f"{kernel!r} runs on cuda but this call's tensors are on {q.device}"
    # PyTorch's CPU selector has two backends (flash, math): flash serves iff it picks it.
    choice = torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale)
    if int(choice) == int(SDPBackend.FLASH_ATTENTION.value):
        return None
    return "PyTorch's CPU selector does not pick its flash kernel for this call"


_refusals: dict[tuple[Any, ...], str | None] = {}


def _signature(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
               dropout_p: float, is_causal: bool, needs_grad: bool) -> tuple[Any, ...]:  # fmt: skip
    masked = None if mask is None else (mask.shape, mask.stride(), mask.dtype)
    return (kernel, q.device, q.dtype, k.dtype, v.dtype, q.shape, k.shape, v.shape, q.stride(),
            k.stride(), v.stride(), masked, dropout_p > 0.0, is_causal, needs_grad)  # fmt: skip


def refusal(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
            dropout_p: float, is_causal: bool, scale: float | None,
            needs_grad: bool) -> str | None:  # fmt: skip
    """Why ``kernel`` cannot serve this call (PyTorch's own words), or None when it can.

    Decided from the inputs' metadata only (shapes, strides, dtypes, device), once per
    signature, so fake tensors get the same answer as the real call.
    """
    key: tuple[Any, ...] | None = _signature(kernel, q, k, v, mask, dropout_p, is_causal,
                                              needs_grad)  # fmt: skip
    try:
        if key in _refusals:
            return _refusals[key]
    except TypeError:  # symbolic sizes (a trace with dynamic shapes): asked, not kept
        key = None
    if (kernel, q.device.type) not in _ENTRY_DEVICES:
        reason: str | None = (
            f"{kernel!r} has no ATen entry point for {q.device.type} tensors in PyTorch "
            f"{torch.__version__}"
        )
    elif q.device.type == "cuda":
        reason = _cuda_refusal(kernel, q, k, v, mask, dropout_p, is_causal)
    else:
        reason = _cpu_refusal(kernel, q, k, v, mask, dropout_p, is_causal, scale)
    if key is not None:
        _refusals[key] = reason
    return reason


# ---------------------------------------------------------------------------------------
# Forward and backward (native)


def forward(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
            dropout_p: float, is_causal: bool, scale: float | None,
            need_lse: bool) -> Saved:  # fmt: skip
    """``kernel``'s output and what :func:`backward` needs, as tensors (empty where the kernel
    keeps none): the op's results. Runs on fake tensors too (the op's fake kernel)."""
    saved: Saved = native.attention_forward(
        ENTRY_CODES[kernel], q, k, v, mask, dropout_p, is_causal, scale, need_lse
    )
    return saved


def backward(kernel: str, grad: Tensor, q: Tensor, k: Tensor, v: Tensor, saved: Saved,
             mask: Tensor | None, dropout_p: float, is_causal: bool,
             scale: float | None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv) from ``kernel``'s own backward, given what its forward saved."""
    out, lse, seed, offset = saved
    grads: tuple[Tensor, Tensor, Tensor] = native.attention_backward(
        ENTRY_CODES[kernel], grad, q, k, v, out, lse, seed, offset, mask, dropout_p, is_causal,
        scale,
    )  # fmt: skip
    return grads


def math_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                   is_causal: bool, scale: float | None) -> Tensor:  # fmt: skip
    """PyTorch's math backend through its ATen entry point (composite: differentiable)."""
    out: Tensor = _aten._scaled_dot_product_attention_math(
        q, k, v, mask, dropout_p, is_causal, None, scale=scale
    )[0]
    return out
