#!/usr/bin/env python3
"""Device-resident I/O binding vs numpy I/O on ONNX Runtime's CUDA execution provider.

The model (y = relu(2x + 1) on a [4096, 1024] float32 input: 16 MiB in, 16 MiB out) does
little compute, so host<->device copies dominate the numpy path. The bound path feeds a
CUDA tensor (PyTorch) that InferenceSession binds with ORT's I/O binding and gets the
output back as a device OrtValue: the record must show zero host copies for it. Both
paths run in the same process, interleaved; the result is the ratio of medians.

Needs onnxruntime-gpu, PyTorch with CUDA and a GPU (the project's device machine):

    python benchmarks/inference_iobinding.py [--iterations 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

ROWS, COLS = 4096, 1024  # 16 MiB of float32


def model(path: Path) -> Path:
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["scaled"], name="scale"),
            helper.make_node("Add", ["scaled", "one"], ["shifted"], name="shift"),
            helper.make_node("Relu", ["shifted"], ["y"], name="relu"),
        ],
        "big_io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, COLS])],
        [two, one],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        str(path),
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import torch  # loads the CUDA libraries onnxruntime-gpu links against

    from xpuruntime.inference import InferenceSession
    from xpuruntime.policies import ExecutionPolicy

    with tempfile.TemporaryDirectory() as tmp:
        sess = InferenceSession(
            model(Path(tmp) / "big_io.onnx"),
            device="cuda:0",
            engine="onnxruntime",
            exec_policy=ExecutionPolicy(fallback="error"),
        )
    host = np.random.default_rng(0).random((ROWS, COLS), dtype=np.float32)
    device = torch.from_numpy(host).to("cuda:0")
    expected = np.maximum(2 * host + 1, 0)
    np.testing.assert_allclose(sess.run({"x": host})["y"], expected, rtol=1e-6)
    bound_out = torch.from_dlpack(sess.run({"x": device})["y"]).cpu().numpy()
    np.testing.assert_allclose(bound_out, expected, rtol=1e-6)

    for _ in range(args.warmup):
        sess.run({"x": host})
        sess.run({"x": device})
    torch.cuda.synchronize()
    numpy_ms, bound_ms = [], []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        sess.run({"x": host})
        t1 = time.perf_counter()
        sess.run({"x": device})
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        numpy_ms.append((t1 - t0) * 1e3)
        bound_ms.append((t2 - t1) * 1e3)
    runs = sess.record().runs
    bound_runs = [r for r in runs if r.io_binding]
    numpy_runs = [r for r in runs if not r.io_binding]
    bound_host_copies = sum(c.count for r in bound_runs for c in r.copies)
    numpy_bytes = [c.bytes for c in numpy_runs[-1].copies]
    result = {
        "input_bytes": int(host.nbytes),
        "iterations": args.iterations,
        "numpy_median_ms": statistics.median(numpy_ms),
        "bound_median_ms": statistics.median(bound_ms),
        "speedup": statistics.median(numpy_ms) / statistics.median(bound_ms),
        "bound_path_host_copies": bound_host_copies,
        "numpy_path_copy_bytes": numpy_bytes,
        "device": torch.cuda.get_device_name(0),
    }
    table = Table(title=f"I/O binding vs numpy I/O, {host.nbytes >> 20} MiB in and out")
    for column in ("numpy ms", "bound ms", "speedup", "host copies (bound)"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{result['numpy_median_ms']:.3f}",
        f"{result['bound_median_ms']:.3f}",
        f"{result['speedup']:.2f}x",
        str(bound_host_copies),
    )
    Console().print(table)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if bound_host_copies:
        sys.exit("the bound path made host copies: I/O binding did not keep data on the device")


if __name__ == "__main__":
    main()
