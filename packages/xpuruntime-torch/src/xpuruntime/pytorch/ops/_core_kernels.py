"""The core's attention kernels seen from PyTorch: ask its dispatcher which of ``xrt_flash`` /
``xrt_flash_hopper`` runs a call, and launch it on PyTorch's tensors (the norms have their own
module, :mod:`._norm_kernels`)."""

from __future__ import annotations

import functools

from torch import Tensor

from xpuruntime.kernels import attention as xrt_attention
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import XpuRuntimeError

__all__ = ["attention_backward", "attention_forward", "attention_kernel"]


def _dtype_name(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


# Attention: (batch, heads, seq, head_dim) tensors as PyTorch's SDPA takes them. The launcher
# is called directly (no DLPack round trip); the dispatcher answers whether it can run.


def _device_name(tensor: Tensor) -> str:
    return "cpu" if tensor.device.type == "cpu" else f"cuda:{tensor.device.index or 0}"


def attention_kernel(query: Tensor, key: Tensor, is_causal: bool, kernel: str) -> tuple[str, str]:
    """(the core kernel that runs this SDPA-layout call, '') under a pin of ``kernel``, or
    ('', the dispatcher's message saying why not). The kernel is the dispatcher's decision:
    the pinned one, or the locked one while a decision lockfile replays (the resolution is
    cached and logged by the core)."""
    batch, heads, seqlen_q, head_dim = query.shape
    shape = xrt_attention.query_shape(
        batch=batch, seqlen_q=seqlen_q, seqlen_k=key.shape[2], heads=heads,
        kv_heads=key.shape[1], head_dim=head_dim, causal=is_causal, varlen=False,
    )  # fmt: skip
    try:
        decision = dispatcher.resolve(
            xrt_attention.OP, shape, _dtype_name(query), _device_name(query), _pin(kernel)
        )
    except XpuRuntimeError as error:
        return "", str(error)
    if decision.kernel not in (xrt_attention.KERNEL, xrt_attention.HOPPER_KERNEL):
        # A replayed lock may name another attention kernel for this signature.
        return "", (
            f"the dispatcher resolved attention to {decision.kernel!r} ({decision.reason}), "
            "which fused_attention does not run"
        )
    return decision.kernel, ""


@functools.cache
def _pin(kernel: str) -> KernelPolicy:
    return KernelPolicy(attention=kernel)


def attention_forward(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, scale: float | None, kernel: str
) -> tuple[Tensor, Tensor, str]:
    """(output, log-sum-exp, detail) of the core's ``kernel`` on SDPA-layout tensors. For
    ``xrt_flash_hopper`` the detail also says which backward :func:`attention_backward` will
    run on these inputs (the record is written once, at the forward)."""
    from xpuruntime.kernels.attention import launch

    if kernel == xrt_attention.HOPPER_KERNEL:
        out, lse, detail = launch.hopper_forward(
            query, key, value, causal=is_causal, scale=scale, layout="bhsd"
        )
        _, backward = launch.hopper_backward_plan(query, causal=is_causal, layout="bhsd")
        return out, lse, f"{detail}; {backward}"
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
    kernel: str,
) -> tuple[Tensor, Tensor, Tensor, str]:
    """(dq, dk, dv, detail) of the backward after the core's ``kernel`` ran the forward on
    SDPA-layout tensors: ``xrt_flash``'s, or after ``xrt_flash_hopper`` the Gluon Hopper
    backward where it takes the call (else ``xrt_flash``'s, on the same log-sum-exp)."""
    from xpuruntime.kernels.attention import launch

    if kernel == xrt_attention.HOPPER_KERNEL:
        return launch.hopper_backward(
            grad, query, key, value, out, lse, causal=is_causal, scale=scale, layout="bhsd"
        )
    return launch.backward(
        grad, query, key, value, out, lse, causal=is_causal, scale=scale, layout="bhsd"
    )
