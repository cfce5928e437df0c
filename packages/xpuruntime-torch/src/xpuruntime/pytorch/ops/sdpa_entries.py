"""PyTorch's SDPA backends called through their own ATen entry points.

``F.scaled_dot_product_attention`` picks its backend from process-wide switches, so running
one named backend through it means flipping those switches around every call: slow, and
visible to every other thread. Here each backend is called directly, the way SDPA itself
calls it once it has chosen: FlashAttention-2 (``flash_v2``; PyTorch's CPU flash kernel for
CPU tensors), memory-efficient (``efficient``) and cuDNN (``cudnn``). The forwards are
differentiable ATen ops: in eager mode PyTorch's own autograd runs the backend's backward
kernel on the log-sum-exp and dropout RNG state the forward kept, exactly as under SDPA; the
custom op (for torch.compile) keeps them as outputs and calls :func:`backward` itself.

Whether a backend can serve a call is PyTorch's own check (``torch.backends.cuda.can_use_*``;
on the CPU, PyTorch's selector), asked once per call signature; the reasons for a refusal
are PyTorch's words. The input
preparation SDPA does before calling a backend is done here the same way: head dims padded
to a multiple of 8 for flash, boolean masks turned additive and expanded for the mask-taking
backends, with the memory-efficient kernel's 16-element alignment of the mask's rows.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.pytorch._compat import SDPBackend, restrict_sdpa
from xpuruntime.pytorch.mapping import ATTENTION_BACKENDS

__all__ = [
    "ENTRY_KERNELS",
    "Saved",
    "backward",
    "forward",
    "math_attention",
    "output",
    "refusal",
]

#: The kernels this module calls (the ``attention`` vocabulary's PyTorch backends less math,
#: which is differentiable as it is and runs through ``aten._scaled_dot_product_attention_math``).
ENTRY_KERNELS = frozenset({"flash_v2", "efficient", "cudnn"})

#: (output, log-sum-exp, RNG seed, RNG offset): the forward's results the backward needs.
Saved = tuple[Tensor, Tensor, Tensor, Tensor]

_aten = torch.ops.aten


def _entry(name: str) -> Any:
    """The ATen op ``name``: its ``torch.<name>`` binding where PyTorch exposes one (the
    forwards; a few microseconds cheaper per call than ``torch.ops.aten``), else
    ``torch.ops.aten.<name>``; None when this PyTorch has no such op."""
    direct = getattr(torch, name, None)
    if direct is not None:
        return direct
    try:
        return getattr(_aten, name)
    except (AttributeError, RuntimeError):
        return None


_FLASH = _entry("_scaled_dot_product_flash_attention")
_FLASH_BACKWARD = _entry("_scaled_dot_product_flash_attention_backward")
_FLASH_CPU = _entry("_scaled_dot_product_flash_attention_for_cpu")
_FLASH_CPU_BACKWARD = _entry("_scaled_dot_product_flash_attention_for_cpu_backward")
_EFFICIENT = _entry("_scaled_dot_product_efficient_attention")
_EFFICIENT_BACKWARD = _entry("_scaled_dot_product_efficient_attention_backward")
_CUDNN = _entry("_scaled_dot_product_cudnn_attention")
_CUDNN_BACKWARD = _entry("_scaled_dot_product_cudnn_attention_backward")

# kernel -> (forward, backward) per device type.
_ENTRIES: dict[tuple[str, str], tuple[Any, Any]] = {
    ("flash_v2", "cuda"): (_FLASH, _FLASH_BACKWARD),
    ("flash_v2", "cpu"): (_FLASH_CPU, _FLASH_CPU_BACKWARD),
    ("efficient", "cuda"): (_EFFICIENT, _EFFICIENT_BACKWARD),
    ("cudnn", "cuda"): (_CUDNN, _CUDNN_BACKWARD),
}

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
    key = _signature(kernel, q, k, v, mask, dropout_p, is_causal, needs_grad)
    if key in _refusals:
        return _refusals[key]
    entries = _ENTRIES.get((kernel, q.device.type))
    if entries is None or entries[0] is None:
        reason: str | None = (
            f"{kernel!r} has no ATen entry point for {q.device.type} tensors in PyTorch "
            f"{torch.__version__}"
        )
    elif q.device.type == "cuda":
        reason = _cuda_refusal(kernel, q, k, v, mask, dropout_p, is_causal)
    else:
        reason = _cpu_refusal(kernel, q, k, v, mask, dropout_p, is_causal, scale)
    if reason is None and needs_grad and entries is not None and entries[1] is None:
        reason = f"PyTorch {torch.__version__} has no backward entry point for {kernel!r}"
    _refusals[key] = reason
    return reason


# ---------------------------------------------------------------------------------------
# Input preparation, as SDPA does it


def _pad_to(t: Tensor, multiple: int) -> Tensor:
    extra = -t.shape[-1] % multiple
    return F.pad(t, (0, extra)) if extra else t


def _additive_mask(mask: Tensor | None, q: Tensor, k: Tensor, align: int,
                   expand: bool = True) -> Tensor | None:  # fmt: skip
    """``mask`` as the additive bias the fused kernels take: expanded to (batch, heads, L, S),
    rows padded to ``align`` elements and sliced back (as SDPA prepares it for the
    memory-efficient kernel)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=mask.device)
        mask = bias.masked_fill_(mask.logical_not(), float("-inf"))
    if not expand:
        return mask
    mask = mask.expand(q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])
    if align > 1 and mask.shape[-1] % align:
        return _pad_to(mask, align)[..., : mask.shape[-1]]
    return mask


def _rng_placeholder(q: Tensor) -> Tensor:
    return q.new_empty(0, dtype=torch.int64)


# ---------------------------------------------------------------------------------------
# Forward and backward


def _run(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
         is_causal: bool, scale: float | None,
         need_lse: bool) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:  # fmt: skip
    """(output, log-sum-exp, seed, offset) from ``kernel``'s entry point; what a kernel does not
    produce is None."""
    device = q.device.type
    if kernel == "flash_v2" and device == "cuda":
        head_dim = q.shape[-1]
        if head_dim % 8:  # padded as SDPA pads it, the scale still that of the true head size
            s = 1.0 / math.sqrt(head_dim) if scale is None else scale
            out, lse, _, _, _, _, seed, offset, _ = _FLASH(
                _pad_to(q, 8), _pad_to(k, 8), _pad_to(v, 8), dropout_p, is_causal, False, scale=s
            )
            return out[..., :head_dim], lse, seed, offset
        out, lse, _, _, _, _, seed, offset, _ = _FLASH(
            q, k, v, dropout_p, is_causal, False, scale=scale
        )
        return out, lse, seed, offset
    if kernel == "flash_v2":
        bias = _additive_mask(mask, q, k, align=1, expand=False)
        out, lse = _FLASH_CPU(q, k, v, dropout_p, is_causal, attn_mask=bias, scale=scale)
        return out, lse, None, None
    if kernel == "efficient":
        bias = _additive_mask(mask, q, k, align=16)
        out, lse, seed, offset = _EFFICIENT(
            q, k, v, bias, need_lse, dropout_p, is_causal, scale=scale
        )
        return out, lse, seed, offset
    if kernel == "cudnn":
        bias = _additive_mask(mask, q, k, align=1)
        out, lse, _, _, _, _, seed, offset, _ = _CUDNN(
            q, k, v, bias, need_lse, dropout_p, is_causal, False, scale=scale
        )
        return out, lse, seed, offset
    raise ValueError(f"no ATen entry point for attention kernel {kernel!r}")


def output(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
           dropout_p: float, is_causal: bool, scale: float | None,
           need_lse: bool) -> Tensor:  # fmt: skip
    """``kernel``'s attention output (after :func:`refusal` said it can serve the call). The
    entry points are differentiable ATen ops: with ``need_lse`` (inputs that need gradients)
    PyTorch's autograd runs the kernel's own backward on what the forward kept."""
    return _run(kernel, q, k, v, mask, dropout_p, is_causal, scale, need_lse)[0]


def forward(kernel: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
            dropout_p: float, is_causal: bool, scale: float | None,
            need_lse: bool) -> Saved:  # fmt: skip
    """``kernel``'s output and what :func:`backward` needs, as tensors (empty where the kernel
    keeps none): the custom op's results."""
    out, lse, seed, offset = _run(kernel, q, k, v, mask, dropout_p, is_causal, scale, need_lse)
    return (
        out,
        q.new_empty(0, dtype=torch.float32) if lse is None else lse,
        _rng_placeholder(q) if seed is None else seed,
        _rng_placeholder(q) if offset is None else offset,
    )


def backward(kernel: str, grad: Tensor, q: Tensor, k: Tensor, v: Tensor, saved: Saved,
             mask: Tensor | None, dropout_p: float, is_causal: bool,
             scale: float | None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv) from ``kernel``'s own backward, given what its forward saved."""
    out, lse, seed, offset = saved
    if grad.stride(-1) != 1:  # an expanded gradient (of .sum()): the kernels read rows
        grad = grad.contiguous()
    device = q.device.type
    if kernel == "flash_v2" and device == "cuda":
        head_dim = q.shape[-1]
        s = 1.0 / math.sqrt(head_dim) if scale is None and head_dim % 8 else scale
        dq, dk, dv = _FLASH_BACKWARD(
            _pad_to(grad, 8), _pad_to(q, 8), _pad_to(k, 8), _pad_to(v, 8), _pad_to(out, 8),
            lse, None, None, q.shape[-2], k.shape[-2], dropout_p, is_causal, seed, offset,
            scale=s,
        )  # fmt: skip
        if dq.shape[-1] != head_dim:
            dq, dk, dv = dq[..., :head_dim], dk[..., :head_dim], dv[..., :head_dim]
        return dq, dk, dv
    if kernel == "flash_v2":
        bias = _additive_mask(mask, q, k, align=1, expand=False)
        dq, dk, dv = _FLASH_CPU_BACKWARD(
            grad, q, k, v, out, lse, dropout_p, is_causal, attn_mask=bias, scale=scale
        )
        return dq, dk, dv
    if kernel == "efficient":
        bias = _additive_mask(mask, q, k, align=16)
        dq, dk, dv, _ = _EFFICIENT_BACKWARD(
            grad, q, k, v, bias, out, lse, seed, offset, dropout_p,
            [True, True, True, False], is_causal, scale=scale,
        )  # fmt: skip
        return dq, dk, dv
    if kernel == "cudnn":
        bias = _additive_mask(mask, q, k, align=1)
        dq, dk, dv = _CUDNN_BACKWARD(
            grad, q, k, v, out, lse, seed, offset, bias, None, None, q.shape[-2], k.shape[-2],
            dropout_p, is_causal, scale=scale,
        )  # fmt: skip
        return dq, dk, dv
    raise ValueError(f"no ATen entry point for attention kernel {kernel!r}")


def math_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                   is_causal: bool, scale: float | None) -> Tensor:  # fmt: skip
    """PyTorch's math backend through its ATen entry point (composite: differentiable)."""
    out: Tensor = _aten._scaled_dot_product_attention_math(
        q, k, v, mask, dropout_p, is_causal, None, scale=scale
    )[0]
    return out
