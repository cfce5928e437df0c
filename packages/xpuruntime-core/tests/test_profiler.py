from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import xpuruntime.ops as ops
import xpuruntime.runtime as rt


def test_ranges_instants_and_op_events_export_as_chrome_trace(tmp_path: Path) -> None:
    rt.profiler.clear()
    rt.profiler.enable()
    try:
        before = time.perf_counter_ns() / 1000
        with rt.profiler.range("step", args={"batch": 4}):
            ops.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
        rt.profiler.instant("checkpoint", {"epoch": 1})
        after = time.perf_counter_ns() / 1000
    finally:
        rt.profiler.disable()
    events = rt.profiler.events()
    names = [e["name"] for e in events]
    assert names == ["xrt::matmul[cpu]", "step", "checkpoint"]
    step = events[1]
    assert step["ph"] == "X"
    assert step["args"] == {"batch": 4}
    assert step["dur"] >= 0
    # Same clock as time.perf_counter_ns, so other sources merge on one axis.
    assert before <= step["ts"] <= after
    assert events[2]["ph"] == "i"

    extra = [{"name": "python-side", "ph": "X", "ts": before, "dur": 1.0, "pid": 1, "tid": 1}]
    path = rt.profiler.export_chrome_trace(tmp_path / "trace.json", extra_events=extra)
    trace = json.loads(path.read_text())
    assert [e["name"] for e in trace["traceEvents"]] == [*names, "python-side"]
    assert trace["otherData"]["dropped_events"] == 0


def test_disabled_profiler_records_nothing() -> None:
    rt.profiler.clear()
    rt.profiler.disable()
    with rt.profiler.range("ignored"):
        pass
    assert rt.profiler.events() == []
    assert not rt.profiler.enabled()
