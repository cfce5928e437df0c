"""xpuruntime.ops: ops dispatched through the kernel policy to the native kernels.

Inputs are anything with ``__dlpack__`` (numpy arrays, torch and cupy tensors, xpuruntime
Tensors); they are viewed without copies, and the result comes back as the first input's
array type (numpy in, numpy out; torch in, torch out), again without a copy.
"""

from __future__ import annotations

from typing import Any

from xpuruntime.ops._calls import last_decision, note, stream_for
from xpuruntime.ops.attention import attention, attention_backward
from xpuruntime.ops.norms import (
    NormGrads,
    NormOutput,
    add_layernorm,
    add_rmsnorm,
    layernorm,
    layernorm_backward,
    layernorm_forward,
    rmsnorm,
    rmsnorm_backward,
    rmsnorm_forward,
)
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import policy_choice
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike
from xpuruntime.runtime.tensor import from_dlpack, like_input

__all__ = [
    "NormGrads",
    "NormOutput",
    "add_layernorm",
    "add_rmsnorm",
    "attention",
    "attention_backward",
    "last_decision",
    "layernorm",
    "layernorm_backward",
    "layernorm_forward",
    "matmul",
    "rmsnorm",
    "rmsnorm_backward",
    "rmsnorm_forward",
]


def matmul(
    a: Any,
    b: Any,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """``a @ b`` for 2-D row-major tensors of one dtype on one device.

    Kernels: ``cublasLt`` and ``cublas`` (CUDA; fp32, fp16, bf16) and ``cpu`` (float32,
    float64). ``policy`` pins/prefers one (``KernelPolicy(matmul="cublasLt")``); without one
    the first supported kernel runs. ``stream`` defaults to the current stream of the input's
    library (torch/cupy) or the legacy default stream. The decision (with the cuBLASLt
    algorithm) is appended to ``record.decisions`` when a record is given.
    """
    kernel, mode, strategy = policy_choice("matmul", policy)
    out, decision, detail = core().matmul(
        from_dlpack(a), from_dlpack(b), kernel, mode, strategy, stream_for(a, stream)
    )
    note(decision, detail, record)
    return like_input(out, a)
