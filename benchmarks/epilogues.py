"""Fused GEMM epilogues: ops.linear(x, w, b, "gelu") against F.gelu(F.linear(x, w, b)) (GPU).

    python benchmarks/epilogues.py [--quick] [--json PATH]

At the LLM shapes of issue 12 (M in {1, 16, 128, 1024, 4096, 16384} tokens; (N, K) in
{(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)}), bf16: one cuBLASLt GEMM with
the GELU_BIAS epilogue against PyTorch's GEMM (BIAS epilogue) plus its GELU kernel, with
GELU's tanh approximation on both sides (what cuBLASLt computes) and, for reference, the
exact erf GELU that F.gelu uses by default. Also the torch custom op
``xpuruntime.pytorch.ops.fused_linear`` (forward) and its host overhead over the same call
of ops.linear. Ratio = peer_ms / ours_ms (target >= 1.2x). CUDA events, alternating batches,
median of rounds. ``--quick``: M in {128, 4096}, two (N, K) pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

LLM_M = [1, 16, 128, 1024, 4096, 16384]
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]


def _timed(torch: Any, fn: Any, reps: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return float(start.elapsed_time(stop)) / reps


def _compare(torch: Any, fns: dict[str, Any]) -> dict[str, float]:
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    once = min(_timed(torch, fn, 1) for fn in fns.values())
    reps = max(3, min(200, int(2.0 / max(once, 1e-3))))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            samples[name].append(_timed(torch, fn, reps))
    return {name: statistics.median(t) for name, t in samples.items()}


def _point(torch: Any, policy: Any, m: int, n: int, k: int) -> dict[str, Any]:
    import torch.nn.functional as F

    import xpuruntime.ops as ops
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.pytorch.ops import fused_linear

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad(), xrt_torch.kernel_policy(linear="cublasLt"):
        t = _compare(torch, {
            "ours": lambda: ops.linear(x, w, b, "gelu", policy=policy),
            "custom_op": lambda: fused_linear(x, w, b, "gelu"),
            "torch_tanh": lambda: F.gelu(F.linear(x, w, b), approximate="tanh"),
            "torch_erf": lambda: F.gelu(F.linear(x, w, b)),
        })  # fmt: skip
    ref = F.gelu(F.linear(x.float(), w.float(), b.float()), approximate="tanh")
    err = (ops.linear(x, w, b, "gelu", policy=policy).float() - ref).abs().max().item()
    row = {
        "m": m, "n": n, "k": k, **{f"{name}_ms": v for name, v in t.items()},
        "ratio_vs_tanh": t["torch_tanh"] / t["ours"],
        "ratio_vs_erf": t["torch_erf"] / t["ours"],
        "custom_op_overhead_us": (t["custom_op"] - t["ours"]) * 1000,
        "max_abs_err": err, "algorithm": ops.last_decision().detail,  # type: ignore[union-attr]
    }  # fmt: skip
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("epilogues.json"))
    args = parser.parse_args()
    import torch

    import xpuruntime.runtime as rt
    from xpuruntime.policies import KernelPolicy

    if not rt.cuda_available():
        print("epilogues needs a GPU and a CUDA build of xpuruntime-core", file=sys.stderr)
        return 2
    policy = KernelPolicy(linear="cublasLt")
    ms_list = [128, 4096] if args.quick else LLM_M
    nk_list = LLM_NK[:2] if args.quick else LLM_NK
    rows = [_point(torch, policy, m, n, k) for m in ms_list for n, k in nk_list]
    geo = math.exp(sum(math.log(r["ratio_vs_tanh"]) for r in rows) / len(rows))
    worst = min(rows, key=lambda r: r["ratio_vs_tanh"])
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "environment": rt.environment_fingerprint(),
        "geomean_vs_tanh": geo,
        "worst_vs_tanh": worst,
        "rows": rows,
    }
    args.json.write_text(json.dumps(result, indent=2, default=str))
    print(f"{result['device']}  torch {torch.__version__}  bf16, ratio = peer_ms / ours_ms")
    print(f"{'M':>6} {'N':>6} {'K':>6} {'ours ms':>9} {'tanh ms':>9} {'x tanh':>7} {'x erf':>7} "
          f"{'op us':>7}")  # fmt: skip
    for r in rows:
        print(f"{r['m']:6d} {r['n']:6d} {r['k']:6d} {r['ours_ms']:9.4f} {r['torch_tanh_ms']:9.4f} "
              f"{r['ratio_vs_tanh']:7.3f} {r['ratio_vs_erf']:7.3f} {r['custom_op_overhead_us']:7.1f}")  # fmt: skip
    print(f"geomean vs F.gelu(F.linear, tanh): {geo:.3f}; worst {worst['ratio_vs_tanh']:.3f} at "
          f"M{worst['m']} N{worst['n']} K{worst['k']}")  # fmt: skip
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
