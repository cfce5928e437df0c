"""xpuruntime.ops: ops dispatched through the kernel policy to the native kernels.

Inputs are anything with ``__dlpack__`` (numpy arrays, torch and cupy tensors, xpuruntime
Tensors); they are viewed without copies, and the result comes back as the first input's
array type (numpy in, numpy out; torch in, torch out), again without a copy.
"""

from __future__ import annotations

from typing import Any

from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import Decision, policy_choice
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike, stream_handle
from xpuruntime.runtime.tensor import from_dlpack, like_input

__all__ = ["last_decision", "layernorm", "matmul"]

# The most recent call's (native decision tuple, kernel detail); a Decision is built only
# when asked for, keeping it off the per-call path.
# (op, kernel, library, mode, reason, shape, dtype, device), as the native module returns it
_DecisionFields = tuple[str, str, str, str, str, str, str, str]
_last: list[tuple[_DecisionFields, str]] = []


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
        from_dlpack(a), from_dlpack(b), kernel, mode, strategy, _stream_for(a, stream)
    )
    _note(decision, detail, record)
    return like_input(out, a)


def layernorm(
    x: Any,
    weight: Any,
    bias: Any,
    eps: float = 1e-5,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """Layer normalisation of ``x`` over its last dimension: (x - mean) / sqrt(var + eps) * weight + bias."""
    kernel, mode, strategy = policy_choice("layernorm", policy)
    out, decision, detail = core().layernorm(
        from_dlpack(x),
        from_dlpack(weight),
        from_dlpack(bias),
        eps,
        kernel,
        mode,
        strategy,
        _stream_for(x, stream),
    )
    _note(decision, detail, record)
    return like_input(out, x)


def last_decision() -> Decision | None:
    """The dispatcher decision of the most recent op call in this process."""
    if not _last:
        return None
    fields, detail = _last[0]
    return Decision(*fields, detail=detail)


def _note(decision: _DecisionFields, detail: str, record: ExecutionRecord | None) -> None:
    _last[:] = [(decision, detail)]
    if record is not None:
        record.decisions.append(Decision(*decision, detail=detail).to_record())


def _stream_for(template: Any, stream: StreamLike) -> int:
    """The explicit stream, else the current stream of the input's library on its device."""
    if stream is not None:
        return stream_handle(stream)
    library = type(template).__module__.partition(".")[0]
    if library == "torch" and template.is_cuda:
        import torch

        return int(torch.cuda.current_stream(template.device).cuda_stream)
    if library == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0
