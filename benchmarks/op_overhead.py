"""Host time per call of xpuruntime.ops against the same op in numpy / PyTorch.

    python benchmarks/op_overhead.py [--device cpu|cuda] [--json PATH] [--quick]

Each figure is the host time of one call (the call returns when the work is enqueued on a
GPU; on the CPU it includes the kernel), measured back to back in this process, and the ratio
against its peer measured in the same run (target: ops.matmul <= 1.2x torch.matmul at
64x64 fp32 and 256x256 bf16 on a GPU):

- cpu: ops.matmul / ops.linear with numpy in and out vs numpy.matmul, and with torch CPU
  tensors vs torch.matmul / F.linear (when torch is installed). The CPU reference kernel is
  slower than numpy's and PyTorch's BLAS, so the tiny 4x4 shapes are the overhead proxy
  (compute ~0): there the ratio is the cost of dispatch, DLPack in and out and recording.
- cuda: torch CUDA tensors: ops.matmul vs torch.matmul (64x64 fp32, 256x256 bf16) and
  ops.linear(bias, gelu) vs F.gelu(F.linear(...)), plus the C++ cached-resolve time.

Prints a table and writes JSON (default op_overhead.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _us_per_call(fn: Callable[[], object], calls: int, rounds: int = 5) -> float:
    """Best of ``rounds`` averages of ``calls`` back-to-back calls, in microseconds."""
    for _ in range(min(calls, 200)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1000)
    return best


def _pair(name: str, ours: Callable[[], object], peer: Callable[[], object], calls: int,
          sync: Callable[[], None] = lambda: None) -> dict[str, Any]:  # fmt: skip
    # Interleave the two so that clock and cache drift affect both alike.
    ours_us, peer_us = [], []
    for _ in range(3):
        ours_us.append(_us_per_call(ours, calls))
        sync()
        peer_us.append(_us_per_call(peer, calls))
        sync()
    o, p = min(ours_us), min(peer_us)
    return {"case": name, "xpuruntime_us": o, "peer_us": p, "ratio": o / p}


def bench_cpu(calls: int) -> list[dict[str, Any]]:
    import numpy as np

    import xpuruntime.ops as ops

    rows = []
    for n in (4, 64):
        a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        rows.append(_pair(f"numpy matmul {n}x{n} fp32", lambda a=a: ops.matmul(a, a),
                          lambda a=a: np.matmul(a, a), calls))  # fmt: skip
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return rows
    for n in (4, 64):
        t = torch.randn(n, n)
        b = torch.randn(n)
        rows.append(_pair(f"torch cpu matmul {n}x{n} fp32", lambda t=t: ops.matmul(t, t),
                          lambda t=t: torch.matmul(t, t), calls))  # fmt: skip
        rows.append(_pair(f"torch cpu linear+bias+gelu {n}x{n} fp32",
                          lambda t=t, b=b: ops.linear(t, t, b, "gelu"),
                          lambda t=t, b=b: F.gelu(F.linear(t, t, b), approximate="tanh"),
                          calls))  # fmt: skip
    return rows


def bench_cuda(calls: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    import torch
    import torch.nn.functional as F

    import xpuruntime.ops as ops
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.native import core

    lt = KernelPolicy(matmul="cublasLt", linear="cublasLt")
    rows = []
    sync = torch.cuda.synchronize
    for n, dtype in ((64, torch.float32), (256, torch.bfloat16)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        label = f"{n}x{n} {str(dtype).removeprefix('torch.')}"
        rows.append(_pair(f"matmul {label}", lambda a=a: ops.matmul(a, a, policy=lt),
                          lambda a=a: torch.matmul(a, a), calls, sync))  # fmt: skip
        rows.append(_pair(f"linear+bias+gelu {label}",
                          lambda a=a, b=b: ops.linear(a, a, b, "gelu", policy=lt),
                          lambda a=a, b=b: F.gelu(F.linear(a, a, b), approximate="tanh"),
                          calls, sync))  # fmt: skip
    resolve_ns = core().bench_cached_resolve_ns(
        "matmul", [256, 256, 256], "bfloat16", "cuda:0", "cublasLt", "pin", "FirstSupported",
        1_000_000,
    )  # fmt: skip
    return rows, {"cached_resolve_cpp_ns": resolve_ns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--json", type=Path, default=Path("op_overhead.json"))
    parser.add_argument("--quick", action="store_true", help="fewer calls per measurement")
    args = parser.parse_args()
    import xpuruntime.runtime as rt

    device = args.device or ("cuda" if rt.cuda_available() else "cpu")
    calls = 2000 if args.quick else 20000
    extra: dict[str, float] = {}
    if device == "cuda":
        rows, extra = bench_cuda(calls)
    else:
        rows = bench_cpu(calls)
    result = {
        "device": device,
        "devices": [d.name for d in rt.get_all_devices()],
        "environment": rt.environment_fingerprint(),
        "rows": rows,
        **extra,
    }
    args.json.write_text(json.dumps(result, indent=2, default=str))
    print(f"host time per call on {device} ({calls} calls, best of rounds)")
    print(f"{'case':42} {'xpuruntime us':>14} {'peer us':>10} {'ratio':>7}")
    for r in rows:
        print(f"{r['case']:42} {r['xpuruntime_us']:14.2f} {r['peer_us']:10.2f} {r['ratio']:7.2f}")
    for key, value in extra.items():
        print(f"{key}: {value:.1f}")
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
