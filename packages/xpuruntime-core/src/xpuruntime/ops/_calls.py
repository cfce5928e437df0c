"""What every op call shares: remembering its decision, and finding its stream."""

from __future__ import annotations

from typing import Any

from xpuruntime.runtime.dispatch import Decision
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike, stream_handle

__all__ = ["DecisionFields", "last_decision", "note", "stream_for"]

# (op, kernel, library, mode, reason, shape, dtype, device), as the native module returns it
DecisionFields = tuple[str, str, str, str, str, str, str, str]

# The most recent call's (native decision tuple, kernel detail); a Decision is built only
# when asked for, keeping it off the per-call path.
_last: list[tuple[DecisionFields, str]] = []


def last_decision() -> Decision | None:
    """The dispatcher decision of the most recent op call in this process."""
    if not _last:
        return None
    fields, detail = _last[0]
    return Decision(*fields, detail=detail)


def note(decision: DecisionFields, detail: str, record: ExecutionRecord | None) -> None:
    _last[:] = [(decision, detail)]
    if record is not None:
        record.decisions.append(Decision(*decision, detail=detail).to_record())


def stream_for(template: Any, stream: StreamLike) -> int:
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
