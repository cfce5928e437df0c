#!/usr/bin/env python3
"""CPU overhead of ``InferenceSession.run`` over raw ``onnxruntime.InferenceSession.run``.

A tiny model (MatMul + Relu on a [1, 4] input) makes the engine's own work small, so the
ratio shows what xpuruntime adds per call: the execution record's run entry, dispatch to
the engine session, building the output dict. The sessions run in the same process,
interleaved call by call (A, B, C, A, B, C ...) so that machine noise hits all alike; the
result is the ratio of medians over ``--calls`` calls each (target: <= 1.2x).

xpuruntime's ONNX Runtime engine calls the pybind session under ``onnxruntime.
InferenceSession.run`` (the wrapper re-checks input names and silently falls back to the
CPU on an execution-provider failure, which a policy forbids). So the table also shows the
pybind call measured the same way: ``session - pybind`` is xpuruntime's own per-call cost.

    python benchmarks/inference_overhead.py [--calls 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy

TARGET_RATIO = 1.2


def tiny_model(path: Path) -> Path:
    weight = numpy_helper.from_array(np.ones((4, 3), dtype=np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["mm"], name="mm"),
            helper.make_node("Relu", ["mm"], ["output"], name="relu"),
        ],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path


def measure(calls: int, warmup: int, threads: int) -> dict[str, float | int | bool | str]:
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp) / "tiny.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        raw = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        sess = InferenceSession(
            model,
            device="cpu",
            engine="onnxruntime",
            exec_policy=ExecutionPolicy(num_threads=threads),
        )
    feeds = {"input": np.ones((1, 4), dtype=np.float32)}
    raw_run, sess_run, pybind_run = raw.run, sess.run, raw._sess.run
    names = ["output"]
    np.testing.assert_array_equal(raw_run(None, feeds)[0], sess_run(feeds)["output"])
    for _ in range(warmup):
        raw_run(None, feeds)
        sess_run(feeds)
        pybind_run(names, feeds, None)
    clock = time.perf_counter_ns
    raw_ns, sess_ns, pybind_ns = [], [], []
    for _ in range(calls):
        t0 = clock()
        raw_run(None, feeds)
        t1 = clock()
        sess_run(feeds)
        t2 = clock()
        pybind_run(names, feeds, None)
        t3 = clock()
        raw_ns.append(t1 - t0)
        sess_ns.append(t2 - t1)
        pybind_ns.append(t3 - t2)
    raw_median = statistics.median(raw_ns) / 1e3
    sess_median = statistics.median(sess_ns) / 1e3
    pybind_median = statistics.median(pybind_ns) / 1e3
    ratio = sess_median / raw_median
    return {
        "calls": calls,
        "warmup": warmup,
        "intra_op_threads": threads,
        "onnxruntime": ort.__version__,
        "raw_median_us": round(raw_median, 3),
        "session_median_us": round(sess_median, 3),
        "pybind_median_us": round(pybind_median, 3),
        "overhead_vs_raw_us": round(sess_median - raw_median, 3),
        "overhead_vs_pybind_us": round(sess_median - pybind_median, 3),
        "ratio": round(ratio, 4),
        "ratio_vs_pybind": round(sess_median / pybind_median, 4),
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=20000, help="timed calls per session (>= 1000)"
    )
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both sessions")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    if args.calls < 1000:
        parser.error("--calls must be at least 1000")
    result = measure(args.calls, args.warmup, args.threads)
    table = Table(
        title="InferenceSession.run vs onnxruntime.InferenceSession.run (CPU, tiny model)"
    )
    for column in (
        "raw median us",
        "session median us",
        "ratio",
        "target",
        "pybind median us",
        "session - pybind us",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        f"{result['raw_median_us']:.3f}",
        f"{result['session_median_us']:.3f}",
        f"{result['ratio']:.3f}x",
        f"<= {TARGET_RATIO}x " + ("ok" if result["meets_target"] else "MISSED"),
        f"{result['pybind_median_us']:.3f}",
        f"{result['overhead_vs_pybind_us']:.3f}",
    )
    Console().print(table)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
