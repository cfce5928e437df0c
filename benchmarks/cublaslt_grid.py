"""cuBLASLt through xpuruntime.ops.matmul against torch.matmul over the issue-12 grid (GPU).

    python benchmarks/cublaslt_grid.py [--quick] [--json PATH] [--kernels B,M,K,N,LAYOUT,DTYPE]

Grid: square 512..8192 and LLM GEMMs with M in {1, 16, 128, 1024, 4096, 16384} and (N, K)
in {(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)}; every point in all four
transpose combinations (NN, NT, TN, TT: T = the operand is a transposed view) for bf16, fp16
and fp32 with TF32 (torch with allow_tf32, xpuruntime with precision="tf32"), plus batched
(3-D) points. Each point: the xpuruntime call once (the cuBLASLt plan is tuned on first use,
outside the timing), three warm-up calls of each, then torch and xpuruntime alternated in
seven CUDA-event-timed batches, the best batch of each. Ratio = torch_ms / xpuruntime_ms
(>= 0.98 is the target at every point). Prints the worst points and the geometric mean per
dtype, writes every point (with the chosen algorithm) to JSON. ``--quick`` runs a subset
(square 1024/4096, M in {16, 4096}, bf16 and fp32-TF32, NN and TN) in well under a minute.
``--kernels B,M,K,N,LAYOUT,DTYPE`` (repeatable)
lists instead the CUDA kernels each side launches at those points, with their mean times
(PyTorch's profiler): what a ratio is made of.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

SQUARE = [512, 1024, 2048, 4096, 8192]
LLM_M = [1, 16, 128, 1024, 4096, 16384]
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
LAYOUTS = ["NN", "NT", "TN", "TT"]
DTYPES = ["bfloat16", "float16", "tf32"]
BATCHED = [(8, 1024, 1024, 1024), (32, 512, 128, 512), (64, 128, 64, 128)]  # (B, M, K, N)


def _grid(quick: bool) -> list[tuple[int, int, int, int]]:
    """(batch, M, K, N) points; batch 0 = plain 2-D."""
    if quick:
        points = [(0, n, n, n) for n in (1024, 4096)]
        points += [(0, m, k, n) for m in (16, 4096) for n, k in LLM_NK[:2]]
        return points + [(b, m, k, n) for b, m, k, n in BATCHED[:1]]
    points = [(0, n, n, n) for n in SQUARE]
    points += [(0, m, k, n) for m in LLM_M for n, k in LLM_NK]
    return points + list(BATCHED)


def _operand(torch: Any, batch: int, rows: int, cols: int, transposed: bool, dtype: Any) -> Any:
    lead = (batch,) if batch else ()
    if transposed:
        return torch.randn(*lead, cols, rows, device="cuda", dtype=dtype).transpose(-1, -2)
    return torch.randn(*lead, rows, cols, device="cuda", dtype=dtype)


def _timed(torch: Any, fn: Any, reps: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return float(start.elapsed_time(stop)) / reps


def _point(torch: Any, ops: Any, policy: Any, point: tuple[int, int, int, int], layout: str,
           dtype_name: str) -> dict[str, Any]:  # fmt: skip
    batch, m, k, n = point
    dtype = torch.float32 if dtype_name == "tf32" else getattr(torch, dtype_name)
    precision = "tf32" if dtype_name == "tf32" else None
    a = _operand(torch, batch, m, k, layout[0] == "T", dtype)
    b = _operand(torch, batch, k, n, layout[1] == "T", dtype)
    ours = lambda: ops.matmul(a, b, policy=policy, precision=precision)  # noqa: E731
    peer = lambda: torch.matmul(a, b)  # noqa: E731
    ours()  # tunes the plan
    decision = ops.last_decision()
    for _ in range(3):  # both sides warm: allocator blocks, cuBLAS handles, clocks
        peer()
        ours()
    torch.cuda.synchronize()
    once = _timed(torch, peer, 1)
    reps = max(3, min(200, int(2.0 / max(once, 1e-3))))  # about 2 ms of GPU time per batch
    t_ours, t_peer = [], []
    for _ in range(7):  # interleaved; the best batch of each (interference only adds time)
        t_peer.append(_timed(torch, peer, reps))
        t_ours.append(_timed(torch, ours, reps))
    ms_ours, ms_peer = min(t_ours), min(t_peer)
    ref = peer().float()
    err = (ours().float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
    return {
        "batch": batch, "m": m, "k": k, "n": n, "layout": layout, "dtype": dtype_name,
        "xpuruntime_ms": ms_ours, "torch_ms": ms_peer, "ratio": ms_peer / ms_ours,
        "tflops": 2.0 * max(batch, 1) * m * n * k / ms_ours / 1e9,
        "rel_err": err, "algorithm": decision.detail if decision else "",
    }  # fmt: skip


def _kernels(torch: Any, point: tuple[int, int, int, int], layout: str, dtype_name: str,
             ops: Any, policy: Any) -> None:  # fmt: skip
    """Print the CUDA kernels each side launches for one point, with their mean time (PyTorch's
    profiler over 20 calls): what a ratio is made of, copies included."""
    from torch.profiler import ProfilerActivity, profile

    batch, m, k, n = point
    dtype = torch.float32 if dtype_name == "tf32" else getattr(torch, dtype_name)
    precision = "tf32" if dtype_name == "tf32" else None
    a = _operand(torch, batch, m, k, layout[0] == "T", dtype)
    b = _operand(torch, batch, k, n, layout[1] == "T", dtype)
    sides = {
        "xpuruntime": lambda: ops.matmul(a, b, policy=policy, precision=precision),
        "torch": lambda: torch.matmul(a, b),
    }
    print(f"\nkernels at {dtype_name} B{batch} M{m} K{k} N{n} {layout} (a strides {a.stride()},"
          f" b strides {b.stride()}):")  # fmt: skip
    for name, fn in sides.items():
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        for event in prof.key_averages():
            if event.device_type.name == "CUDA" and event.count:
                average = event.device_time_total / event.count
                print(f"  {name:10} x{event.count:<3} {average:8.1f} us  {event.key[:110]}")
        print(f"  {name:10} host+device per call: {_timed(torch, fn, 50) * 1000:.1f} us")


Point = tuple[tuple[int, int, int, int], str, str]


def _parse_point(text: str) -> Point:
    """``B,M,K,N,LAYOUT,DTYPE`` (B = 0 for a 2-D GEMM), as argparse's ``type``: a malformed
    point is a usage error that says what a point looks like."""
    fields = text.split(",")
    usage = (
        f"{text!r} is not B,M,K,N,LAYOUT,DTYPE (for example 0,16,4096,14336,TT,bfloat16): "
        f"B a non-negative integer (0 for a 2-D GEMM), M, K, N positive integers, LAYOUT one of "
        f"{', '.join(LAYOUTS)}, DTYPE one of {', '.join(DTYPES)}"
    )
    if len(fields) != 6 or fields[4] not in LAYOUTS or fields[5] not in DTYPES:
        raise argparse.ArgumentTypeError(usage)
    try:
        batch, m, k, n = (int(x) for x in fields[:4])
    except ValueError:
        raise argparse.ArgumentTypeError(usage) from None
    if min(batch, m, k, n) < 0 or min(m, k, n) == 0:
        raise argparse.ArgumentTypeError(usage)
    return (batch, m, k, n), fields[4], fields[5]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("cublaslt_grid.json"))
    parser.add_argument(
        "--kernels",
        action="append",
        default=[],
        type=_parse_point,
        metavar="B,M,K,N,LAYOUT,DTYPE",
        help="only list the kernels each side launches at this point (repeatable), e.g. "
        "0,16,4096,14336,TT,bfloat16",
    )
    args = parser.parse_args()
    import torch

    import xpuruntime.ops as ops
    import xpuruntime.runtime as rt
    from xpuruntime.policies import KernelPolicy

    if not rt.cuda_available():
        print("cublaslt_grid needs a GPU and a CUDA build of xpuruntime-core", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True  # the peer of precision="tf32"
    policy = KernelPolicy(matmul="cublasLt")
    if args.kernels:
        for point, layout, dtype_name in args.kernels:
            _kernels(torch, point, layout, dtype_name, ops, policy)
        return 0
    dtypes = ["bfloat16", "tf32"] if args.quick else DTYPES
    layouts = ["NN", "TN"] if args.quick else LAYOUTS
    rows = []
    started = time.perf_counter()
    for dtype_name in dtypes:
        for point in _grid(args.quick):
            for layout in layouts:
                rows.append(_point(torch, ops, policy, point, layout, dtype_name))
                torch.cuda.empty_cache()
    elapsed = time.perf_counter() - started
    summary = {}
    for dtype_name in dtypes:
        ratios = [r["ratio"] for r in rows if r["dtype"] == dtype_name]
        worst = min((r for r in rows if r["dtype"] == dtype_name), key=lambda r: r["ratio"])
        summary[dtype_name] = {
            "geomean": math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
            "worst": worst,
            "points": len(ratios),
            "below_0.98": sum(1 for x in ratios if x < 0.98),
        }
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "environment": rt.environment_fingerprint(),
        "seconds": elapsed,
        "summary": summary,
        "points": rows,
    }
    args.json.write_text(json.dumps(result, indent=2, default=str))
    print(f"{result['device']}  torch {torch.__version__}  {len(rows)} points in {elapsed:.0f} s")
    print(f"{'dtype':9} {'geomean':>8} {'<0.98':>6}  worst point")
    for dtype_name, s in summary.items():
        w = s["worst"]
        where = f"B{w['batch']} " if w["batch"] else ""
        print(f"{dtype_name:9} {s['geomean']:8.3f} {s['below_0.98']:6d}  {w['ratio']:.3f} at "
              f"{where}M{w['m']} K{w['k']} N{w['n']} {w['layout']} ({w['algorithm']})")  # fmt: skip
    print("\nslowest 10 points (ratio = torch_ms / xpuruntime_ms):")
    for r in sorted(rows, key=lambda r: r["ratio"])[:10]:
        print(f"  {r['dtype']:9} B{r['batch']} M{r['m']:<6} K{r['k']:<6} N{r['n']:<6} "
              f"{r['layout']}  {r['torch_ms']:.4f} vs {r['xpuruntime_ms']:.4f} ms  {r['ratio']:.3f}")  # fmt: skip
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
