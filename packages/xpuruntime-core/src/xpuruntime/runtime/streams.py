"""CUDA streams, events and graphs.

``stream`` arguments take an :class:`Stream`, a raw ``cudaStream_t`` as int (for example
``torch.cuda.current_stream().cuda_stream``), or None for the legacy default stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from xpuruntime.runtime.native import core

__all__ = ["Event", "Graph", "Stream", "StreamLike", "stream_handle"]


class Stream:
    """A non-blocking CUDA stream owned by xpuruntime."""

    def __init__(self, device: int = 0, priority: int = 0) -> None:
        self._native: Any = core().Stream(device, priority)

    @property
    def handle(self) -> int:
        """The ``cudaStream_t`` as an int (pass it to other libraries)."""
        return int(self._native.handle)

    @property
    def device(self) -> int:
        return int(self._native.device)

    def synchronize(self) -> None:
        """Wait for all work queued on this stream (GIL released while waiting)."""
        self._native.synchronize()

    def query(self) -> bool:
        """True when all queued work has finished."""
        return bool(self._native.query())

    def __repr__(self) -> str:
        return f"Stream(device={self.device}, handle={self.handle:#x})"


StreamLike = Stream | int | None


def stream_handle(stream: StreamLike) -> int:
    """The raw handle of a stream argument (0 = legacy default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, Stream):
        return stream.handle
    return int(stream)


class Event:
    """A CUDA event; with timing enabled, two recorded events give the elapsed time."""

    def __init__(self, enable_timing: bool = True) -> None:
        self._native: Any = core().Event(enable_timing)

    def record(self, stream: StreamLike = None) -> None:
        self._native.record(stream_handle(stream))

    def synchronize(self) -> None:
        self._native.synchronize()

    def query(self) -> bool:
        return bool(self._native.query())

    def wait(self, stream: StreamLike = None) -> None:
        """Make ``stream`` wait (on the device) until this event has completed."""
        self._native.wait(stream_handle(stream))

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds between this (start) event and ``end``; both must be recorded."""
        return float(self._native.elapsed_ms(end._native))


class Graph:
    """Captures the work issued on a stream and replays it as one CUDA graph.

    Memory the pool hands out during capture stays reserved for the graph until it is
    reset or destroyed, so replays never write into reused blocks::

        graph = Graph()
        with graph.capture(stream):
            out = xpuruntime.ops.matmul(a, b, stream=stream)
        graph.replay()
    """

    def __init__(self) -> None:
        self._native: Any = core().Graph()
        self._stream = 0
        # Keeps an xpuruntime Stream alive as long as the graph may replay on it.
        self._stream_owner: StreamLike = None

    @contextlib.contextmanager
    def capture(self, stream: StreamLike) -> Iterator[Graph]:
        """Capture work issued on ``stream`` (an xpuruntime or foreign non-default stream)."""
        handle = stream_handle(stream)
        self._native.begin(handle)
        self._stream = handle
        self._stream_owner = stream
        try:
            yield self
        finally:
            self._native.end()

    def replay(self, stream: StreamLike = None) -> None:
        """Launch the captured graph (default: on the stream it was captured on)."""
        self._native.replay(stream_handle(stream) if stream is not None else self._stream)

    def reset(self) -> None:
        """Drop the captured graph and give its memory back to the pool."""
        self._native.reset()

    @property
    def captured(self) -> bool:
        return bool(self._native.captured)

    @property
    def replays(self) -> int:
        return int(self._native.replays)
