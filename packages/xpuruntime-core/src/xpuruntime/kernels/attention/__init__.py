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

``xrt_flash_hopper`` is a warp-specialised forward and backward for Hopper (sm_90) written in
Gluon (:mod:`.hopper`, :mod:`.hopper_bwd`), registered first so that the automatic choice
takes it where it runs; a backward the Gluon kernels do not serve (head size 256) runs on
``xrt_flash``'s Triton backward on the same log-sum-exp, and the decision says so.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from xpuruntime.kernels.attention.support import (
    QUERY_FIELDS,
    fp8_unsupported_reason,
    hopper_unsupported_reason,
    query_shape,
    unsupported_reason,
)

__all__ = [
    "FP8_HOPPER_LIBRARY",
    "FP8_KERNEL",
    "FP8_LIBRARY",
    "FP8_TRITON_LIBRARY",
    "HOPPER_KERNEL",
    "HOPPER_LIBRARY",
    "KERNEL",
    "LIBRARY",
    "OP",
    "QUERY_FIELDS",
    "fp8_unsupported_reason",
    "hopper_unsupported_reason",
    "query_shape",
    "register",
    "unsupported_reason",
]

OP = "attention"
#: The kernel's name in the policy vocabulary (``KernelPolicy(attention="xrt_flash")``).
KERNEL = "xrt_flash"
#: What actually runs it, as decisions and execution records name it.
LIBRARY = "xpuruntime Triton"
#: The fp8 (e4m3) forward, for inference: float16/bfloat16 inputs quantized inside, output
#: in the inputs' dtype. Lossy, so only a policy that pins or prefers it runs it: it is
#: registered after ``xrt_flash``, which the automatic choice takes first.
FP8_KERNEL = "xrt_flash_fp8"
#: Its registered library: two kernels run it (the run's detail, and ``ops.attention``'s
#: record, name the one that ran).
FP8_LIBRARY = "xpuruntime fp8 (Gluon on Hopper, Triton elsewhere)"
FP8_TRITON_LIBRARY = "xpuruntime Triton fp8"
FP8_HOPPER_LIBRARY = "xpuruntime Gluon fp8 (Hopper, warp-specialised)"
#: The warp-specialised Hopper (sm_90) forward, in Gluon: registered before ``xrt_flash``, so
#: the automatic choice takes it on an H100/H200 where it can run the call and passes to
#: ``xrt_flash`` elsewhere (the decision's reason lists why it was passed over). Its backward
#: is the Gluon Hopper backward where it serves the call, else ``xrt_flash``'s Triton one.
HOPPER_KERNEL = "xrt_flash_hopper"
HOPPER_LIBRARY = "xpuruntime Gluon (Hopper, warp-specialised)"


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


def _run_fp8(inputs: list[Any], scalars: list[float], output: Any, stream: int) -> str:
    """``_run`` for ``xrt_flash_fp8``: float16/bfloat16 inputs quantized to e4m3 here."""
    from torch.utils.dlpack import from_dlpack

    from xpuruntime.kernels.attention import fp8

    q, k, v = (from_dlpack(t) for t in inputs)
    causal, scale = bool(scalars[0]), scalars[1] or None
    handle = stream or None
    quantized = fp8.quantize(q, k, v, layout="bshd", stream=handle)
    out, _, detail = fp8.forward(
        quantized, causal=causal, scale=scale, layout="bshd", stream=handle
    )
    from_dlpack(output).copy_(out)
    return detail


def _run_hopper(inputs: list[Any], scalars: list[float], output: Any, stream: int) -> str:
    """``_run`` for ``xrt_flash_hopper`` (the same inputs, scalars and output)."""
    from torch.utils.dlpack import from_dlpack

    from xpuruntime.kernels.attention import launch

    q, k, v = (from_dlpack(t) for t in inputs)
    causal, scale = bool(scalars[0]), scalars[1] or None
    _, _, detail = launch.hopper_forward(
        q, k, v, causal=causal, scale=scale, layout="bshd", stream=stream or None,
        out=from_dlpack(output),
    )  # fmt: skip
    return detail


def register(core: ModuleType) -> None:
    """Register ``xrt_flash_hopper``, ``xrt_flash`` and then ``xrt_flash_fp8`` for op
    ``attention`` in the native kernel registry (the order is the automatic choice's: bf16/fp16
    calls take the Hopper forward on sm_90 where it runs, else ``xrt_flash``)."""
    core.register_python_kernel(
        OP, HOPPER_KERNEL, HOPPER_LIBRARY, hopper_unsupported_reason, _run_hopper
    )
    core.register_python_kernel(OP, KERNEL, LIBRARY, unsupported_reason, _run)
    core.register_python_kernel(OP, FP8_KERNEL, FP8_LIBRARY, fp8_unsupported_reason, _run_fp8)
