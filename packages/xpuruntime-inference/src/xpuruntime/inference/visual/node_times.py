"""Per-node time from the engines' own profilers.

* ONNX Runtime: an xpuruntime session opened with ``profiling=True`` (the engine sets
  ``SessionOptions.enable_profiling``); the profile's ``<node>_kernel_time`` events
  (``EngineSession.profile_events``) give each node's time per run.
* OpenVINO: ``CompiledModel`` compiled by OpenVINO itself with ``PERF_COUNT`` on, and the
  infer request's ``get_profiling_info()`` (``real_time`` of every executed node). The
  xpuruntime OpenVINO session keeps its infer request to itself, so this is a compile of its
  own on the same device with OpenVINO's default properties; ``NodeTimes.source`` says so.

Engine node names become Model Explorer node ids (:mod:`.graph_ids`): by the node's name,
by ONNX Runtime's ``<op>_<index>`` for an unnamed node, by output tensor name (OpenVINO names
an unnamed node after its output). Nodes the engine made itself (fused, reorders) match no
graph node; their time is kept in ``unmatched_us`` so no time disappears.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xpuruntime.inference.visual.graph_ids import GraphIds
from xpuruntime.policies import ExecutionPolicy, LayeredPolicy

#: ONNX Runtime's suffix of the event that times a node's kernel.
KERNEL_TIME = "_kernel_time"


@dataclass
class NodeTimes:
    """Mean time per run of each graph node, and what measured it."""

    engine: str
    device: str
    source: str
    runs: int
    mean_us: dict[str, float] = field(default_factory=dict)
    #: Engine nodes that are no graph node -> their mean time per run.
    unmatched_us: dict[str, float] = field(default_factory=dict)
    #: The engine's per-node events (Chrome trace events), for a timeline.
    events: list[dict[str, Any]] = field(default_factory=list)


class _Resolver:
    """Engine node names -> adapter node ids."""

    def __init__(self, graph: GraphIds) -> None:
        self.by_name: dict[str, str] = {}
        self.by_output: dict[str, str] = {}
        #: ONNX Runtime numbers the main graph's nodes in file order.
        self.by_index: dict[int, tuple[str, str]] = {}
        for node in graph.nodes:
            if node.name:
                self.by_name.setdefault(node.name, node.id)
            for output in node.outputs:
                self.by_output.setdefault(output, node.id)
            if node.index is not None:
                self.by_index[node.index] = (node.op_type, node.id)

    def ort(self, name: str, op_type: str, index: int | None) -> str | None:
        if name in self.by_name:
            return self.by_name[name]
        if index is not None and name == f"{op_type}_{index}":
            op, node_id = self.by_index.get(index, ("", ""))
            return node_id if op == op_type else None
        return None

    def openvino(self, name: str) -> str | None:
        return self.by_name.get(name) or self.by_output.get(name)


def onnxruntime_times(
    model: Path,
    graph: GraphIds,
    feeds: Mapping[str, np.ndarray],
    *,
    device: str = "cpu",
    runs: int = 10,
    policy: ExecutionPolicy | LayeredPolicy | None = None,
) -> NodeTimes:
    """Mean per-node kernel time over ``runs`` runs (after one untimed run) from ONNX
    Runtime's profiler."""
    from xpuruntime.inference.session import InferenceSession

    resolve = _Resolver(graph)
    with InferenceSession(
        model,
        engine="onnxruntime",
        device=device,
        exec_policy=policy,
        policy_arguments={"execution": {"profiling": True}},
    ) as sess:
        for _ in range(runs + 1):
            sess.run(feeds)
        profile = sess.engine_session.profile_events()
        times = NodeTimes(
            "onnxruntime",
            sess.device,
            "ONNX Runtime profiler (SessionOptions.enable_profiling): the "
            f"{KERNEL_TIME[1:]} events of {runs} runs after one untimed run, per run",
            runs,
        )
    # ONNX Runtime times each run ("model_run"); a node may run several times in a run (a
    # loop body) or not at all (an If branch not taken), so time is summed per run window.
    windows = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in profile
        if e.get("name") == "model_run"
    )
    # Without run windows the untimed run cannot be told apart: it is averaged in.
    untimed_end = windows[0][1] if windows else float("-inf")
    counted = runs if windows else runs + 1
    events = [
        e
        for e in profile
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith(KERNEL_TIME)
    ]
    totals: dict[str, float] = defaultdict(float)
    op_and_index: dict[str, tuple[str, int | None]] = {}
    for event in events:
        name = str(event["name"])[: -len(KERNEL_TIME)]
        args = event.get("args", {})
        event["args"] = {k: args[k] for k in ("op_name", "provider", "node_index") if k in args}
        index = event["args"].get("node_index")
        op_and_index[name] = (str(args.get("op_name", "")), None if index is None else int(index))
        if float(event["ts"]) > untimed_end:
            totals[name] += float(event.get("dur", 0.0))
    for name, (op_type, index) in op_and_index.items():
        per_run = totals.get(name, 0.0) / counted
        node_id = resolve.ort(name, op_type, index)
        if node_id is None:
            times.unmatched_us[name] = per_run
        else:
            times.mean_us[node_id] = times.mean_us.get(node_id, 0.0) + per_run
    times.events = events
    return times


def openvino_times(
    model: Path,
    graph: GraphIds,
    feeds: Mapping[str, np.ndarray],
    *,
    device: str = "CPU",
    runs: int = 10,
) -> NodeTimes:
    """Mean per-node ``real_time`` over ``runs`` runs (after one untimed run) from
    OpenVINO's performance counters."""
    import openvino

    resolve = _Resolver(graph)
    compiled = openvino.Core().compile_model(str(model), device.upper(), {"PERF_COUNT": True})
    request = compiled.create_infer_request()
    request.infer(dict(feeds))
    totals: dict[str, float] = defaultdict(float)
    events: list[dict[str, Any]] = []
    for run in range(runs):
        start_us = time.perf_counter_ns() / 1000.0
        request.infer(dict(feeds))
        offset = start_us
        for info in request.get_profiling_info():
            if info.status != info.Status.EXECUTED:
                continue
            us = info.real_time.total_seconds() * 1e6
            totals[info.node_name] += us
            # Counters have durations, not start times: laid out in execution order.
            events.append(
                {
                    "name": info.node_name,
                    "cat": "Node",
                    "ph": "X",
                    "ts": offset,
                    "dur": us,
                    "pid": "openvino",
                    "tid": f"run {run}",
                    "args": {"op_name": info.node_type, "exec_type": info.exec_type},
                }
            )
            offset += us
    times = NodeTimes(
        "openvino",
        device.lower(),
        "OpenVINO performance counters (PERF_COUNT, InferRequest.get_profiling_info real_time) "
        f"of a compile_model({device.upper()!r}) with OpenVINO's default properties: mean of "
        f"{runs} runs after one untimed run",
        runs,
        events=events,
    )
    for name, total in totals.items():
        node_id = resolve.openvino(name)
        if node_id is None:
            times.unmatched_us[name] = total / runs
        else:
            times.mean_us[node_id] = times.mean_us.get(node_id, 0.0) + total / runs
    return times
