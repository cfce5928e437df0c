"""SessionPool throughput: every GPU of the machine against one GPU, on a compute-bound model.

    python benchmarks/session_pool.py [--out DIR] [--quick] [--engine onnxruntime|tensorrt]

The model is a stack of 4096 x 4096 float32 MatMul + Relu layers (one shared weight, so
the file stays small) ending in a narrow projection: ~2 x batch x 4096^2 x layers FLOP per
run against a 4 MiB input and a 16 KiB output, so the GPU's arithmetic, not the host
copies, bounds a run. Three ways, interleaved over several rounds in one process:

* ``direct``: one InferenceSession on cuda:0 called from one thread (the reference);
* ``pool x1``: a SessionPool on cuda:0, driven by as many threads as it has sessions;
* ``pool xN``: a SessionPool on every GPU, same sessions per device and threads per session.

Throughput is runs per second (median over rounds); the result is ``pool xN / pool x1``
(target >= 1.9 on 2 GPUs, ~N in general). On a machine with one GPU, N = 1 and the figures
are the single-device ones (pool overhead against the direct session). Outputs of every
device are checked against cuda:0's. Writes ``session_pool.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, OUT = 4096, 4


def model(path: Path, layers: int) -> Path:
    """x[batch, 4096] -> (MatMul W, Relu) x layers -> MatMul P -> y[batch, 4]."""
    rng = np.random.default_rng(0)
    # Scaled so activations stay finite through many layers.
    w = (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN) * 1.4).astype(np.float32)
    p = (rng.standard_normal((HIDDEN, OUT)) / np.sqrt(HIDDEN)).astype(np.float32)
    nodes = []
    current = "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [current, "W"], [f"mm{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Relu", [f"mm{i}"], [f"h{i}"], name=f"relu{i}"))
        current = f"h{i}"
    nodes.append(helper.make_node("MatMul", [current, "P"], ["y"], name="project"))
    graph = helper.make_graph(
        nodes,
        "matmul_stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(p, "P")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        str(path),
    )
    return path


def throughput(
    call: Callable[[list[dict[str, Any]]], object], feeds: list[dict[str, Any]]
) -> float:
    start = time.perf_counter()
    call(feeds)
    return len(feeds) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-results"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engine", default="onnxruntime")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--sessions-per-device", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch  # loads the CUDA libraries onnxruntime-gpu links against

    from xpuruntime.inference import InferenceSession, SessionPool
    from xpuruntime.policies import ExecutionPolicy

    gpus = torch.cuda.device_count()
    if gpus == 0:
        sys.exit("needs at least one CUDA GPU")
    rounds = 2 if args.quick else args.rounds
    per_device = 8 if args.quick else 40  # requests per session per measurement
    policy = ExecutionPolicy(fallback="error")
    x = np.random.default_rng(1).standard_normal((args.batch, HIDDEN)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = model(Path(tmp) / "matmul_stack.onnx", args.layers)
        direct = InferenceSession(path, device="cuda:0", engine=args.engine, exec_policy=policy)
        one = SessionPool(
            path, ["cuda:0"], engine=args.engine, exec_policy=policy,
            sessions_per_device=args.sessions_per_device,
        )  # fmt: skip
        every = SessionPool(
            path, [f"cuda:{i}" for i in range(gpus)], engine=args.engine, exec_policy=policy,
            sessions_per_device=args.sessions_per_device,
        )  # fmt: skip

    reference = direct.run({"x": x})["y"]
    for session in every.sessions:  # every device computes the same result
        np.testing.assert_allclose(session.run({"x": x})["y"], reference, rtol=1e-3, atol=1e-3)

    feeds_one = [{"x": x}] * (per_device * len(one))
    feeds_every = [{"x": x}] * (per_device * len(every))
    feeds_direct = [{"x": x}] * per_device
    measured: dict[str, list[float]] = {"direct": [], "pool x1": [], f"pool x{gpus}": []}
    for call, feeds in ((one.map, feeds_one), (every.map, feeds_every)):  # warm-up
        call(feeds[: len(feeds) // 4])
    for _ in range(rounds):
        measured["direct"].append(throughput(lambda fs: [direct.run(f) for f in fs], feeds_direct))
        measured["pool x1"].append(throughput(one.map, feeds_one))
        measured[f"pool x{gpus}"].append(throughput(every.map, feeds_every))
    medians = {name: statistics.median(values) for name, values in measured.items()}
    ratio = medians[f"pool x{gpus}"] / medians["pool x1"]
    flop = 2 * args.batch * HIDDEN * HIDDEN * args.layers + 2 * args.batch * HIDDEN * OUT
    record = every.record()
    runs_per_device: dict[str, int] = {}
    for run in record.runs:
        runs_per_device[str(run.device)] = runs_per_device.get(str(run.device), 0) + 1
    report = {
        "benchmark": "session_pool",
        "gpus": gpus,
        "gpu": torch.cuda.get_device_name(0),
        "engine": args.engine,
        "model": {
            "batch": args.batch,
            "hidden": HIDDEN,
            "layers": args.layers,
            "gflop_per_run": flop / 1e9,
        },
        "sessions_per_device": args.sessions_per_device,
        "rounds": rounds,
        "runs_per_second": medians,
        "all_rounds": measured,
        "tflops": {name: value * flop / 1e12 for name, value in medians.items()},
        "ratio_every_gpu_to_one": ratio,
        "target": 1.9 if gpus == 2 else None,
        "pool_over_direct_one_gpu": medians["pool x1"] / medians["direct"],
        "recorded_runs_per_device": runs_per_device,
        "fallbacks": len(record.fallbacks),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "session_pool.json").write_text(json.dumps(report, indent=1))
    print(f"{gpus} x {report['gpu']}, {args.engine}, {flop / 1e9:.0f} GFLOP per run")
    for name, value in medians.items():
        print(f"{name:>10}: {value:8.1f} runs/s  ({value * flop / 1e12:6.1f} TFLOP/s)")
    print(f"pool x{gpus} / pool x1 = {ratio:.2f}" + (" (target >= 1.9)" if gpus == 2 else ""))
    print(f"pool x1 / direct = {report['pool_over_direct_one_gpu']:.2f}")
    print(f"runs per device in the pool's record: {runs_per_device}")


if __name__ == "__main__":
    main()
