"""The core's attention kernels seen from PyTorch: ask its dispatcher whether ``xrt_flash``
can run a call, and launch it on PyTorch's tensors (the norms have their own module,
:mod:`._norm_kernels`)."""

from __future__ import annotations

import functools

from torch import Tensor

from xpuruntime.kernels import attention as xrt_attention
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import XpuRuntimeError

__all__ = ["attention_backward", "attention_forward", "attention_unsupported"]


def _dtype_name(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


# Attention: (batch, heads, seq, head_dim) tensors as PyTorch's SDPA takes them. The launcher
# is called directly (no DLPack round trip); the dispatcher answers whether it can run.


def _device_name(tensor: Tensor) -> str:
    return "cpu" if tensor.device.type == "cpu" else f"cuda:{tensor.device.index or 0}"


def attention_unsupported(query: Tensor, key: Tensor, is_causal: bool) -> str:
    """'' when the core's ``xrt_flash`` can run this SDPA-layout call, else the dispatcher's
    message saying why not (the resolution is cached and logged by the core)."""
    batch, heads, seqlen_q, head_dim = query.shape
    shape = xrt_attention.query_shape(
        batch=batch, seqlen_q=seqlen_q, seqlen_k=key.shape[2], heads=heads,
        kv_heads=key.shape[1], head_dim=head_dim, causal=is_causal, varlen=False,
    )  # fmt: skip
    try:
        dispatcher.resolve(
            xrt_attention.OP, shape, _dtype_name(query), _device_name(query), _pin_attention()
        )
    except XpuRuntimeError as error:
        return str(error)
    return ""


@functools.cache
def _pin_attention() -> KernelPolicy:
    return KernelPolicy(attention=xrt_attention.KERNEL)


def attention_forward(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None
) -> tuple[Tensor, Tensor, str]:
    """(output, log-sum-exp, detail) of ``xrt_flash`` on SDPA-layout tensors."""
    from xpuruntime.kernels.attention import launch

    return launch.forward(query, key, value, causal=is_causal, scale=scale, layout="bhsd")


def attention_backward(
    grad: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    is_causal: bool,
    scale: float | None,
) -> tuple[Tensor, Tensor, Tensor, str]:
    """(dq, dk, dv, detail) of ``xrt_flash`` on SDPA-layout tensors."""
    from xpuruntime.kernels.attention import launch

    return launch.backward(
        grad, query, key, value, out, lse, causal=is_causal, scale=scale, layout="bhsd"
    )
