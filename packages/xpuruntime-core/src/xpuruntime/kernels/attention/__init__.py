"""``xrt_flash``: xpuruntime's FlashAttention-class attention kernels (forward and backward).

Written in Triton (``docs/attention.md`` says why): one source
compiles for sm_80 and sm_90 (``tl.dot`` becomes wgmma on Hopper; loads go through the tensor
memory accelerator there), JIT-compiled on first use into Triton's content-addressed cache,
and testable without a GPU in Triton's interpreter (``TRITON_INTERPRET=1``).

Features: float16/bfloat16; head sizes 16-256 (powers of two); full and causal (top-left,
as PyTorch's SDPA); grouped-query and multi-query attention; packed variable-length batches
(``cu_seqlens``); explicit softmax scale; the forward returns the log-sum-exp the backward
uses; the backward returns dq, dk, dv with dk/dv summed over each key/value head's group.

Public entry points: :func:`xpuruntime.ops.attention` / :func:`xpuruntime.ops.attention_backward`
and, for training, :func:`xpuruntime.pytorch.ops.fused_attention` under a policy naming
``xrt_flash``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from xpuruntime.kernels.attention.support import QUERY_FIELDS, query_shape, unsupported_reason

__all__ = [
    "KERNEL",
    "LIBRARY",
    "OP",
    "QUERY_FIELDS",
    "query_shape",
    "register",
    "unsupported_reason",
]

OP = "attention"
#: The kernel's name in the policy vocabulary (``KernelPolicy(attention="xrt_flash")``).
KERNEL = "xrt_flash"
#: What actually runs it, as decisions and execution records name it.
LIBRARY = "xpuruntime Triton"


def _run(inputs: list[Any], scalars: list[float], output: Any, stream: int) -> str:
    """The registry's run entry for native callers: dense (batch, seq, heads, dim) query,
    key and value as xpuruntime Tensors, scalars ``[causal, scale]`` (scale 0: 1/sqrt(dim)),
    the output written into ``output``."""
    from torch.utils.dlpack import from_dlpack

    from xpuruntime.kernels.attention import launch

    q, k, v = (from_dlpack(t) for t in inputs)
    causal, scale = bool(scalars[0]), scalars[1] or None
    _, _, detail = launch.forward(
        q, k, v, causal=causal, scale=scale, layout="bshd", stream=stream or None,
        out=from_dlpack(output),
    )  # fmt: skip
    return detail


def register(core: ModuleType) -> None:
    """Register ``xrt_flash`` for op ``attention`` in the native kernel registry."""
    core.register_python_kernel(OP, KERNEL, LIBRARY, unsupported_reason, _run)
