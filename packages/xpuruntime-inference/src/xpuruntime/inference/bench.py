"""Latency percentiles and throughput of ``InferenceSession.run``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import numpy as np

from xpuruntime.inference.session import InferenceSession


class LatencyStats(msgspec.Struct, frozen=True):
    """Latency of one run, in milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float


class BenchResult(msgspec.Struct, frozen=True):
    """What ``xpuruntime bench`` writes as JSON."""

    model: str
    engine: str
    device: str
    warmup: int
    iterations: int
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
    iterations: int = 100,
    on_step: Callable[[], None] | None = None,
) -> BenchResult:
    """Time ``iterations`` runs after ``warmup`` untimed ones (``on_step`` after each)."""
    if iterations < 1 or warmup < 0:
        raise ValueError(f"need iterations >= 1 and warmup >= 0, got {iterations} and {warmup}")
    for _ in range(warmup):
        sess.run(feeds)
        if on_step is not None:
            on_step()
    latencies = []
    started = time.perf_counter()
    for _ in range(iterations):
        t0 = time.perf_counter()
        sess.run(feeds)
        latencies.append((time.perf_counter() - t0) * 1e3)
        if on_step is not None:
            on_step()
    elapsed = time.perf_counter() - started
    first = next(iter(feeds.values()), None)
    batch = int(first.shape[0]) if first is not None and len(first.shape) else 1
    record = sess.record()
    return BenchResult(
        model=str(record.model),
        engine=sess.engine,
        device=sess.device,
        warmup=warmup,
        iterations=iterations,
        batch=batch,
        latency_ms=latency_stats(latencies),
        throughput_runs_per_s=iterations / elapsed,
        throughput_samples_per_s=iterations * batch / elapsed,
        policy_hash=record.policy_hash,
        environment_hash=record.environment_hash,
    )
