"""What every op call shares: which decision came last, and finding its stream.

Native ops (matmul, linear, ...) record their decision natively, per thread, at no cost to
the call. Ops launched from Python (the Triton attention kernels, the norms' launches) note
theirs here, with the native call counter at that moment, so :func:`last_decision` returns
whichever call of this thread came last.
"""

from __future__ import annotations

import threading
from typing import Any

from xpuruntime.runtime.dispatch import Decision
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike, stream_handle

__all__ = ["DecisionFields", "last_decision", "note", "record_last", "stream_for"]

# (op, kernel, library, mode, reason, shape, dtype, device), as the native module returns it
DecisionFields = tuple[str, str, str, str, str, str, str, str]

_local = threading.local()


def last_decision() -> Decision | None:
    """The dispatcher decision of this thread's most recent op call."""
    native = core()
    noted: tuple[DecisionFields, str, int] | None = getattr(_local, "noted", None)
    if noted is not None and noted[2] == native.last_call_serial():
        fields, detail, _ = noted
        return Decision(*fields, detail=detail)
    found = native.last_decision()
    return None if found is None else Decision._from_native(found)


def note(decision: DecisionFields, detail: str, record: ExecutionRecord | None) -> None:
    """Remember the decision of an op launched from Python (and add it to ``record``)."""
    _local.noted = (decision, detail, core().last_call_serial())
    if record is not None:
        record.decisions.append(Decision(*decision, detail=detail).to_record())


def record_last(record: ExecutionRecord) -> None:
    """Add this thread's most recent decision to ``record``."""
    decision = last_decision()
    if decision is not None:
        record.decisions.append(decision.to_record())


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
