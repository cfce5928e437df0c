"""Timelines as Chrome trace JSON (open in https://ui.perfetto.dev or chrome://tracing).

* A run's per-node timeline: ONNX Runtime through the session's own trace export
  (``InferenceSession.export_trace``: the engine's profile merged with the core profiler's
  ranges, one clock); OpenVINO from its performance counters, which give durations but no
  start times, so its nodes are laid end to end in execution order (the trace says so).
* A training step's kernels: from the trace ``xpuruntime.pytorch.profile(
  export_chrome_trace=...)`` wrote, the device kernels, copies and memsets (each with the
  CPU op that launched it) and xpuruntime's own ranges; nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xpuruntime.inference.visual.graph_ids import read_graph_ids
from xpuruntime.inference.visual.node_times import openvino_times
from xpuruntime.policies import ExecutionPolicy, LayeredPolicy

#: Chrome trace categories PyTorch's profiler gives device work.
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


def _write(path: Path, events: list[dict[str, Any]], other: Mapping[str, Any]) -> Path:
    trace = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(other)}
    path.write_text(json.dumps(trace))
    return path


def run_timeline(
    model: Path,
    feeds: Mapping[str, np.ndarray],
    path: Path,
    *,
    engine: str = "onnxruntime",
    device: str = "cpu",
    runs: int = 3,
    policy: ExecutionPolicy | LayeredPolicy | None = None,
) -> Path:
    """Run ``model`` ``runs`` times with the engine's profiler on; write its per-node
    timeline to ``path``."""
    from xpuruntime.inference.session import InferenceSession

    if engine == "openvino":
        times = openvino_times(model, read_graph_ids(model), feeds, device=device, runs=runs)
        return _write(
            path,
            times.events,
            {
                "producer": "xpuruntime timeline",
                "source": times.source,
                "layout": "OpenVINO's counters have no start times: each run's nodes are "
                "laid end to end in execution order",
            },
        )
    with InferenceSession(
        model,
        engine=engine,
        device=device,
        exec_policy=policy,
        policy_arguments={"execution": {"profiling": True}},
    ) as sess:
        for _ in range(runs):
            sess.run(feeds)
        return sess.export_trace(path)


def kernel_timeline(trace: Path, path: Path) -> tuple[Path, int]:
    """The device kernels of a training step's profiler trace, with the ops that launched
    them and xpuruntime's ranges; returns the file and the number of kernels."""
    from xpuruntime.inference.errors import InvalidModelError

    try:
        data = json.loads(trace.read_text())
        events: list[dict[str, Any]] = data["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidModelError(
            f"{trace} is not a Chrome trace with traceEvents ({exc}); write one with "
            "xpuruntime.pytorch.profile(export_chrome_trace=PATH)"
        ) from exc
    # A kernel and the CPU op that launched it share a correlation id through the runtime
    # call (cudaLaunchKernel...), which runs inside the op.
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
        key=lambda e: float(e["ts"]),
    )
    kept: list[dict[str, Any]] = []
    kernels = 0
    for event in events:
        category = event.get("cat")
        if category in DEVICE_CATEGORIES:
            kernels += category == "kernel"
            launch = launches.get(event.get("args", {}).get("correlation"))
            if launch is not None:
                op = _enclosing(ops, launch)
                if op is not None:
                    event = {**event, "args": {**event.get("args", {}), "launched by": op}}
            kept.append(event)
        elif (
            category == "xrt"
            or event.get("args", {}).get("source") == "xpuruntime"
            or event.get("ph") == "M"
        ):
            kept.append(event)
    other = {"producer": "xpuruntime kernel-timeline", "from": str(trace), "kernels": kernels}
    return _write(path, kept, other), kernels


def _enclosing(ops: list[dict[str, Any]], launch: Mapping[str, Any]) -> str | None:
    """The innermost CPU op on the launch's thread whose span holds the launch."""
    ts = float(launch["ts"])
    found = None
    for op in ops:
        start = float(op["ts"])
        if start > ts:
            break
        if op.get("tid") == launch.get("tid") and start + float(op.get("dur", 0)) >= ts:
            found = str(op.get("name"))
    return found
