"""Accuracy against ONNX Runtime's CPU EP, session creation time and run latency of the NPU
engines on the machine at hand (here: OpenVINO CPU plugin, QNN HTP simulator).

    python benchmarks/npu_accuracy_latency.py [--out results.json]

Models are the npu test suite's (packages/xpuruntime-npu/tests/conftest.py builders); int8 models are quantized for real
(NNCF for OpenVINO, onnxruntime.quantization QDQ for QNN) on 32 random calibration feeds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from xpuruntime.npu.engines.openvino import OpenVINOEngine
from xpuruntime.npu.engines.qnn import QNNEngine
from xpuruntime.npu.quantize import quantize_for_openvino, quantize_for_qnn
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.record import ExecutionRecord

_spec = importlib.util.spec_from_file_location(
    "npu_test_models",
    Path(__file__).parents[1] / "packages" / "xpuruntime-npu" / "tests" / "conftest.py",
)
assert _spec is not None
assert _spec.loader is not None
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)


def measure(engine: Any, model: Path, policy: ExecutionPolicy, runs: int) -> dict[str, Any]:
    record = ExecutionRecord(kind="inference")
    start = time.perf_counter()
    session = engine().create_session(
        model, device="cpu", exec_policy=policy, kernel_policy=None, record=record
    )
    create_s = time.perf_counter() - start
    errors = []
    for seed in range(100, 110):
        feeds = models.inputs_for(model, seed=seed)
        want = models.reference(model, feeds)
        got = session.run(feeds)
        errors += [float(np.abs(got[k] - v).max() / np.abs(v).max()) for k, v in want.items()]
    feeds = models.inputs_for(model, seed=1)
    latencies = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(feeds)
        latencies.append((time.perf_counter() - start) * 1e3)
    return {
        "max_rel_err": max(errors),
        "create_s": round(create_s, 3),
        "run_ms_p50": round(statistics.median(latencies), 4),
        "precision_ran": record.precision.chosen if record.precision else None,
        "fallbacks": [f"{f.what}: {f.requested} -> {f.chosen}" for f in record.fallbacks],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, build in (("mlp", models.build_mlp), ("cnn", models.build_cnn)):
            model = build(folder / f"{name}.onnx")
            calibration = [models.inputs_for(model, seed=s) for s in range(32)]
            ov_int8 = quantize_for_openvino(model, calibration, folder / f"{name}.int8.xml")
            qdq = quantize_for_qnn(model, calibration, folder / f"{name}.qdq.onnx")
            cases = {
                "openvino/fp32": (OpenVINOEngine, {}),
                "openvino/int8": (
                    OpenVINOEngine,
                    {"precision": "int8", "quantized_model": str(ov_int8)},
                ),
                "qnn-htp-sim/fp32": (QNNEngine, {}),
                "qnn-htp-sim/fp16": (
                    QNNEngine,
                    {"precision": "fp16", "engine_options": {"qnn": {"soc_model": "69"}}},
                ),
                "qnn-htp-sim/int8": (QNNEngine, {"precision": "int8", "quantized_model": str(qdq)}),
            }
            for case, (engine, settings) in cases.items():
                policy = ExecutionPolicy(fallback="allow", **settings)
                results[f"{name}/{case}"] = measure(engine, model, policy, args.runs)
                print(f"{name}/{case}", results[f"{name}/{case}"], flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
