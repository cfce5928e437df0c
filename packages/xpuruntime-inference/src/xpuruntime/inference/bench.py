"""Latency percentiles and throughput of ``InferenceSession.run``.

Like trtexec and OpenVINO's benchmark_app: warm-up by count and time, then measurement for
at least ``iterations`` runs and at least ``duration`` seconds, by ``concurrency`` threads
sharing the one session (benchmark_app's parallel infer requests; the engines release the
GIL while they run). Each run is timed on its own; the progress callback is called from
the caller's thread while the workers run, never inside a timed run.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import numpy as np

from xpuruntime.inference.session import InferenceSession

#: How often the progress callback is called while the workers run.
PROGRESS_INTERVAL_S = 0.1


class LatencyStats(msgspec.Struct, frozen=True):
    """Latency of one run, in milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float


class BenchResult(msgspec.Struct, frozen=True):
    """What ``xpuruntime bench --json`` writes."""

    model: str
    engine: str
    device: str
    warmup_runs: int
    warmup_s: float
    iterations: int
    duration_s: float
    concurrency: int
    batch: int
    latency_ms: LatencyStats
    throughput_runs_per_s: float
    throughput_samples_per_s: float
    policy_hash: str | None
    environment_hash: str | None


def latency_stats(latencies_ms: list[float]) -> LatencyStats:
    values = np.asarray(latencies_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return LatencyStats(
        float(p50),
        float(p90),
        float(p99),
        float(values.mean()),
        float(values.min()),
        float(values.max()),
    )


def benchmark(
    sess: InferenceSession,
    feeds: Mapping[str, Any],
    *,
    warmup: int = 10,
    warmup_time: float = 0.0,
    iterations: int | None = 100,
    duration: float | None = None,
    concurrency: int = 1,
    on_progress: Callable[[int, float], None] | None = None,
) -> BenchResult:
    """Warm up (``warmup`` runs and ``warmup_time`` seconds), then time at least
    ``iterations`` runs and ``duration`` seconds on ``concurrency`` threads.

    ``on_progress(runs_done, seconds)`` is called about every 0.1 s while measuring.
    """
    if iterations is None and duration is None:
        raise ValueError("give iterations, duration or both")
    if (iterations is not None and iterations < 1) or (duration is not None and duration <= 0):
        raise ValueError(f"need iterations >= 1 and duration > 0, got {iterations}, {duration}")
    if warmup < 0 or warmup_time < 0 or concurrency < 1:
        raise ValueError(
            f"need warmup >= 0, warmup_time >= 0 and concurrency >= 1, got {warmup}, "
            f"{warmup_time} and {concurrency}"
        )
    warmup_runs, warmup_s = _warm_up(sess, feeds, warmup, warmup_time)
    latencies, elapsed = _measure(sess, feeds, iterations, duration, concurrency, on_progress)
    runs = len(latencies)
    first = next(iter(feeds.values()), None)
    batch = int(first.shape[0]) if first is not None and len(first.shape) else 1
    record = sess.record()
    return BenchResult(
        model=str(record.model),
        engine=sess.engine,
        device=sess.device,
        warmup_runs=warmup_runs,
        warmup_s=warmup_s,
        iterations=runs,
        duration_s=elapsed,
        concurrency=concurrency,
        batch=batch,
        latency_ms=latency_stats(latencies),
        throughput_runs_per_s=runs / elapsed,
        throughput_samples_per_s=runs * batch / elapsed,
        policy_hash=record.policy_hash,
        environment_hash=record.environment_hash,
    )


def _warm_up(
    sess: InferenceSession, feeds: Mapping[str, Any], runs: int, seconds: float
) -> tuple[int, float]:
    start = time.perf_counter()
    done = 0
    while done < runs or time.perf_counter() - start < seconds:
        sess.run(feeds)
        done += 1
    return done, time.perf_counter() - start


def _measure(
    sess: InferenceSession,
    feeds: Mapping[str, Any],
    iterations: int | None,
    duration: float | None,
    concurrency: int,
    on_progress: Callable[[int, float], None] | None,
) -> tuple[list[float], float]:
    """Per-run latencies (ms) of all workers and the wall time of the measurement."""
    tickets = itertools.count()  # next() is atomic in CPython: one ticket per run
    per_worker: list[list[float]] = [[] for _ in range(concurrency)]
    finished: list[float] = []
    failures: list[BaseException] = []
    clock = time.perf_counter
    start = clock()
    deadline = start + (duration or 0.0)
    wanted = iterations or 0

    def work(latencies: list[float]) -> None:
        try:
            while next(tickets) < wanted or clock() < deadline:
                t0 = clock()
                sess.run(feeds)
                latencies.append((clock() - t0) * 1e3)
        except BaseException as exc:  # re-raised in the caller's thread
            failures.append(exc)
        finished.append(clock())

    alive = [threading.Thread(target=work, args=(lat,), daemon=True) for lat in per_worker]
    for worker in alive:
        worker.start()
    while alive:
        alive[0].join(PROGRESS_INTERVAL_S)
        alive = [w for w in alive if w.is_alive()]
        if on_progress is not None:
            on_progress(sum(len(lat) for lat in per_worker), clock() - start)
    if failures:
        raise failures[0]
    return [x for lat in per_worker for x in lat], max(finished) - start
