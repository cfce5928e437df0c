"""Profiler: ranges and instant events (also NVTX ranges in CUDA builds), Chrome trace export.

Recording is off until :func:`enable`; NVTX ranges are emitted regardless, so Nsight Systems
sees them without enabling the buffer. Timestamps use the clock of ``time.perf_counter_ns()``
(CLOCK_MONOTONIC), so events from other sources on that clock merge on one time axis.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.runtime.native import core

__all__ = [
    "clear",
    "disable",
    "dropped",
    "enable",
    "enabled",
    "events",
    "export_chrome_trace",
    "instant",
    "range",
]


def enable() -> None:
    core().profiler_enable()


def disable() -> None:
    core().profiler_disable()


def enabled() -> bool:
    return bool(core().profiler_enabled())


def clear() -> None:
    core().profiler_clear()


def dropped() -> int:
    """Events overwritten because the ring buffer (65536 events) was full."""
    return int(core().profiler_dropped())


def _args_json(args: Mapping[str, Any] | None) -> str:
    return msgspec.json.encode(dict(args)).decode() if args else ""


@contextlib.contextmanager
def range(
    name: str, category: str = "xrt", args: Mapping[str, Any] | None = None
) -> Iterator[None]:
    """Record the enclosed block as one complete ('X') event and an NVTX range."""
    native = core()
    start = native.profiler_begin_range(name)
    try:
        yield
    finally:
        native.profiler_end_range(name, category, start, _args_json(args))


def instant(name: str, args: Mapping[str, Any] | None = None, category: str = "xrt") -> None:
    """Record a point-in-time ('i') event (and an NVTX mark)."""
    core().profiler_instant(name, category, _args_json(args))


def events() -> list[dict[str, Any]]:
    """Recorded events, oldest first, in Chrome trace event format."""
    out: list[dict[str, Any]] = []
    for name, cat, ph, ts, dur, pid, tid, args in core().profiler_events():
        event: dict[str, Any] = {
            "name": name,
            "cat": cat,
            "ph": ph,
            "ts": ts,
            "pid": pid,
            "tid": tid,
        }
        if ph == "X":
            event["dur"] = dur
        else:
            event["s"] = "t"  # instant scoped to its thread
        if args:
            event["args"] = msgspec.json.decode(args)
        out.append(event)
    return out


def export_chrome_trace(
    path: str | os.PathLike[str], extra_events: Iterable[Mapping[str, Any]] | None = None
) -> Path:
    """Write recorded events plus ``extra_events`` as a Chrome trace (opens in Perfetto)."""
    trace = {
        "traceEvents": [*events(), *(dict(e) for e in extra_events or ())],
        "displayTimeUnit": "ms",
        "otherData": {"producer": "xpuruntime", "dropped_events": dropped()},
    }
    target = Path(path)
    target.write_bytes(msgspec.json.encode(trace))
    return target
