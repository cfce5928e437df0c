"""Timing shared by the attention benchmarks (imported from beside them: run them as
``python benchmarks/<name>.py``): samples of back-to-back calls between CUDA events,
interleaved across the implementations of a case, and CUDA-graph replays of such calls (the
kernels alone, no host work).

Timed one implementation after another, whatever drifts over a case (the GPU's clocks)
goes to some of them: in one H200 run the same Gluon kernel measured 551 and 591 TFLOP/s at
two positions. Interleaved in a fixed order, each implementation would still always follow
the same one, so the order rotates each round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch


def sample_ms(fn: Callable[[], Any], calls: int) -> float:
    """Milliseconds per call over one sample of ``calls`` back-to-back calls (CUDA events
    around the sample: the GPU's queue stays full, so host-side launch costs hide behind the
    kernels except the first call's)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], rounds: int, calls: int
) -> dict[str, float]:
    """Median milliseconds per call of each function over ``rounds`` samples of ``calls``
    calls: each round times every function once, starting one further along each round."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(sample_ms(fns[name], calls))
    return {name: statistics.median(times) for name, times in samples.items()}


def graph_replay(fn: Callable[[], Any], calls: int) -> Callable[[], None]:
    """A replay of ``calls`` calls of ``fn`` captured in a CUDA graph (``fn`` runs once
    before the capture, so it compiles and allocates outside it)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay
