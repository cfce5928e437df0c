"""``profile()``: PyTorch's profiler and the core's, merged into one Chrome trace.

Both profilers run for the block. On export, PyTorch's trace (CPU ops, CUDA kernels) is
written by ``torch.profiler`` and the core's events (ranges, instants: dispatcher, memory
pool, graph capture) are appended to it. The two use different clocks, so a marker is
recorded in both at the start and the core's timestamps are shifted to line up with it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from xpuruntime.pytorch._compat import PROFILER_OPTIONS
from xpuruntime.pytorch.explain import record_from_events
from xpuruntime.runtime import profiler as core_profiler
from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["Profile", "profile"]

SYNC_MARKER = "xpuruntime.clock_sync"


class Profile:
    """The finished (or running) profiling session of a :func:`profile` block."""

    def __init__(self, torch_profiler: torch.profiler.profile) -> None:
        self.torch_profiler = torch_profiler
        self._core_events: list[dict[str, Any]] = []
        self._core_start = 0.0

    def core_events(self) -> list[dict[str, Any]]:
        """The core's events of the block, shifted to PyTorch's clock."""
        return list(self._core_events)

    def record(self) -> ExecutionRecord:
        """Which kernels ran for which ops during the block (see :func:`explain`)."""
        return record_from_events(list(self.torch_profiler.events()))  # type: ignore[no-untyped-call]

    def _collect(self) -> None:
        events = core_profiler.events()
        markers = [e for e in events if e.get("name") == SYNC_MARKER]
        if not markers:
            self._core_events = []
            return
        start = markers[-1]["ts"]
        self._core_events = [
            e for e in events if e.get("ts", start) >= start and e.get("name") != SYNC_MARKER
        ]
        self._core_start = float(start)

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write one Chrome trace (Perfetto / chrome://tracing) holding both profilers."""
        target = Path(path)
        with tempfile.TemporaryDirectory() as scratch:
            torch_path = Path(scratch) / "torch.json"
            self.torch_profiler.export_chrome_trace(str(torch_path))
            trace = json.loads(torch_path.read_text())
        events: list[dict[str, Any]] = trace.setdefault("traceEvents", [])
        anchor = next((e for e in events if e.get("name") == SYNC_MARKER), None)
        offset = float(anchor["ts"]) - self._core_start if anchor and self._core_events else 0.0
        for event in self._core_events:
            shifted = dict(event)
            shifted["ts"] = float(event["ts"]) + offset
            shifted.setdefault("args", {})["source"] = "xpuruntime"
            events.append(shifted)
        target.write_text(json.dumps(trace))
        return target


@contextmanager
def profile(
    activities: Sequence[torch.profiler.ProfilerActivity] | None = None,
    record_shapes: bool = True,
    profile_memory: bool = True,
    with_stack: bool = False,
    export_chrome_trace: str | os.PathLike[str] | None = None,
) -> Iterator[Profile]:
    """Profile the block with PyTorch's profiler and the core's; optionally export a trace.

    ``activities`` defaults to CPU plus CUDA when PyTorch has a GPU. The yielded
    :class:`Profile` gives the merged trace (``export_chrome_trace``), the core's events and
    an execution record of the kernels that ran.
    """
    chosen = list(activities) if activities is not None else [torch.profiler.ProfilerActivity.CPU]
    if activities is None and torch.cuda.is_available():
        chosen.append(torch.profiler.ProfilerActivity.CUDA)
    core_profiler.enable()
    try:
        with torch.profiler.profile(
            activities=chosen,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            **PROFILER_OPTIONS,
        ) as prof:
            session = Profile(prof)
            with torch.profiler.record_function(SYNC_MARKER):
                core_profiler.instant(SYNC_MARKER, {})
            yield session
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    finally:
        core_profiler.disable()
    session._collect()
    if export_chrome_trace is not None:
        session.export_chrome_trace(export_chrome_trace)
