"""LayerNorm / RMSNorm kernels of the core against PyTorch's, on one CUDA GPU.

    python benchmarks/norms_bench.py [--out DIR] [--quick] [--dtypes bfloat16,float16,float32]

For h in 1024, 2048, 4096, 8192, 12288, 16384 (rows: at least 16384, and at least 64 Mi
elements so that every call is long enough to hide host time), each dtype:

- forward: ``xpuruntime.pytorch.ops.fused_layernorm`` / ``fused_rmsnorm`` (policy ``xrt``,
  eager, no grad) against ``F.layer_norm`` / ``F.rms_norm``;
- residual forward: ``fused_add_layernorm`` / ``fused_add_rmsnorm`` against ``x + r`` then
  the PyTorch norm;
- backward: the ``fused_*_backward`` ops against what PyTorch's autograd runs
  (``native_layer_norm_backward``, ``_fused_rms_norm_backward``), from the same statistics.

Every figure is GPU time (CUDA events over back-to-back calls, median of repeats) and is put
against the peer measured in the same run: the speedup over PyTorch, and the achieved
bandwidth (bytes the op must move, read + write) as a share of this run's device-to-device
copy bandwidth (a large ``copy_``, read + write counted). Geometric means over h, and the
issue-12 targets: forward >= 85 % of copy bandwidth at every h, LayerNorm forward >= 1.3x
and RMSNorm forward >= 1.2x PyTorch (geomean), backward >= 1.3x PyTorch (geomean).

Last, the host overhead of the custom ops: host time per call at a tiny shape of the public
functions (no grad and grad), of the registered op through PyTorch's dispatcher, and of
``F.layer_norm``, against the raw kernel launch they wrap (target: <= 5 us over it).

Prints tables and writes ``norms_bench.json`` to ``--out``. About 1-2 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

WIDTHS = (1024, 2048, 4096, 8192, 12288, 16384)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
MIN_ROWS, MIN_ELEMENTS = 16384, 1 << 26


def gpu_us(fn: Callable[[], Any], iters: int, repeats: int = 5) -> tuple[float, float]:
    """(median GPU microseconds per call, host microseconds per call) over back-to-back calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    gpu, host = [], []
    for _ in range(repeats):
        begin = time.perf_counter()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        host.append((time.perf_counter() - begin) * 1e6 / iters)
        end.synchronize()
        gpu.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(gpu), statistics.median(host)


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (read + write bytes) of a 1 GiB copy_."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    us, _ = gpu_us(lambda: dst.copy_(src), iters=10)
    return 2 * src.nbytes / (us * 1e-6) / 1e9


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def launch_configs(norm: str, x: torch.Tensor, w: torch.Tensor) -> dict[str, str]:
    """The launch shapes the core picks for rows of x, by direction (dispatcher details)."""
    import xpuruntime.ops as ops
    from xpuruntime.policies import KernelPolicy

    row = x[:1]
    policy = KernelPolicy(**{norm: "xrt"})
    if norm == "layernorm":
        out = ops.layernorm_forward(row, w, None, policy=policy)
        forward = ops.last_decision()
        ops.layernorm_backward(row, row, w, out.mean, out.rstd, policy=policy)
    else:
        out = ops.rmsnorm_forward(row, w, policy=policy)
        forward = ops.last_decision()
        ops.rmsnorm_backward(row, row, w, out.rstd, policy=policy)
    backward = ops.last_decision()
    detail = {
        "forward": forward.detail if forward is not None else "",
        "backward": backward.detail if backward is not None else "",
    }
    detail["residual forward"] = detail["forward"]
    return detail


def bench_width(dtype: torch.dtype, h: int, iters: int) -> list[dict[str, Any]]:
    from xpuruntime.pytorch.ops import (
        fused_add_layernorm,
        fused_add_rmsnorm,
        fused_layernorm,
        fused_rmsnorm,
    )

    rows = max(MIN_ROWS, MIN_ELEMENTS // h)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, h, device="cuda", dtype=dtype, generator=gen)
    r = torch.randn(rows, h, device="cuda", dtype=dtype, generator=gen)
    dy = torch.randn(rows, h, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(h, device="cuda", dtype=dtype, generator=gen) * 0.1 + 1
    b = torch.randn(h, device="cuda", dtype=dtype, generator=gen)
    tensor_bytes = x.nbytes
    xops: Any = torch.ops.xpuruntime
    results: list[dict[str, Any]] = []

    def record(
        norm: str, direction: str, moved: int, ours: Callable[[], Any], theirs: Callable[[], Any]
    ) -> None:
        ours_us, ours_host = gpu_us(ours, iters)
        torch_us, torch_host = gpu_us(theirs, iters)
        results.append(
            {
                "dtype": str(dtype).removeprefix("torch."),
                "h": h,
                "rows": rows,
                "norm": norm,
                "direction": direction,
                "bytes": moved,
                "ours_us": ours_us,
                "torch_us": torch_us,
                "speedup": torch_us / ours_us,
                "ours_host_bound": ours_host > 0.8 * ours_us,
                "torch_host_bound": torch_host > 0.8 * torch_us,
            }
        )

    import xpuruntime.pytorch as xrt_torch

    with torch.no_grad(), xrt_torch.kernel_policy(layernorm="xrt", rmsnorm="xrt"):
        # LayerNorm
        record(
            "layernorm",
            "forward",
            2 * tensor_bytes,
            lambda: fused_layernorm(x, [h], w, b),
            lambda: F.layer_norm(x, [h], w, b),
        )
        record(
            "layernorm",
            "residual forward",
            4 * tensor_bytes,
            lambda: fused_add_layernorm(x, r, [h], w, b),
            lambda: F.layer_norm(x + r, [h], w, b),
        )
        _, stats = xops.fused_layernorm(x, [h], w, b, 1e-5, "xrt", "pin")
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [h], w, b, 1e-5)
        record(
            "layernorm",
            "backward",
            3 * tensor_bytes,
            lambda: xops.fused_layernorm_backward(
                dy, x, [h], w, stats, None, True, True, "xrt", "pin"
            ),
            lambda: torch.ops.aten.native_layer_norm_backward(
                dy, x, [h], mean, rstd, w, b, [True, True, True]
            ),
        )
        # RMSNorm
        record(
            "rmsnorm",
            "forward",
            2 * tensor_bytes,
            lambda: fused_rmsnorm(x, [h], w, 1e-6),
            lambda: F.rms_norm(x, [h], w, 1e-6),
        )
        record(
            "rmsnorm",
            "residual forward",
            4 * tensor_bytes,
            lambda: fused_add_rmsnorm(x, r, [h], w, 1e-6),
            lambda: F.rms_norm(x + r, [h], w, 1e-6),
        )
        _, rms_stats = xops.fused_rmsnorm(x, [h], w, None, 1e-6, "xrt", "pin")
        record(
            "rmsnorm",
            "backward",
            3 * tensor_bytes,
            lambda: xops.fused_rmsnorm_backward(
                dy, x, [h], w, rms_stats, None, True, False, "xrt", "pin"
            ),
            _torch_rms_backward(dy, x, h, w),
        )
        configs = {norm: launch_configs(norm, x, w) for norm in ("layernorm", "rmsnorm")}
    for entry in results:
        entry["launch"] = configs[entry["norm"]][entry["direction"]]
    return results


def _torch_rms_backward(
    dy: torch.Tensor, x: torch.Tensor, h: int, w: torch.Tensor
) -> Callable[[], Any]:
    """What PyTorch's autograd runs for F.rms_norm's backward."""
    fused = getattr(torch.ops.aten, "_fused_rms_norm", None)
    if fused is not None and hasattr(torch.ops.aten, "_fused_rms_norm_backward"):
        _, rstd = fused(x, [h], w, 1e-6)
        return lambda: torch.ops.aten._fused_rms_norm_backward(dy, x, [h], rstd, w, [True, True])
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    with torch.enable_grad():
        y = F.rms_norm(xg, [h], wg, 1e-6)
    return lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)


def host_overhead(calls: int = 3000) -> dict[str, float]:
    """Host microseconds per call at a tiny shape, and each path's overhead over the kernel."""
    from xpuruntime.pytorch._compat import current_raw_stream
    from xpuruntime.pytorch.ops import fused_layernorm
    from xpuruntime.runtime.native import core

    h = 1024
    x = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    raw, code = core().norm_forward_raw, int(core().NORM_DTYPE_CODES["bfloat16"])
    pointers = (x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr())

    def kernel() -> None:  # the launch the custom op wraps, on preallocated memory
        xp, wp, bp, yp = pointers
        raw(False, code, 0, 1, h, xp, 0, wp, bp, yp, 0, 0, 0, 1e-5, current_raw_stream(0))

    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    xops: Any = torch.ops.xpuruntime
    import xpuruntime.pytorch as xrt_torch

    paths: dict[str, Callable[[], Any]] = {
        "raw kernel launch": kernel,
        "fused_layernorm (no grad)": lambda: fused_layernorm(x, [h], w, b),
        "fused_layernorm (grad)": lambda: fused_layernorm(xg, [h], wg, bg),
        "torch.ops.xpuruntime.fused_layernorm": lambda: xops.fused_layernorm(
            x, [h], w, b, 1e-5, "xrt", "pin"
        ),
        "F.layer_norm (no grad)": lambda: F.layer_norm(x, [h], w, b),
        "F.layer_norm (grad)": lambda: F.layer_norm(xg, [h], wg, bg),
    }
    best = dict.fromkeys(paths, float("inf"))
    with xrt_torch.kernel_policy(layernorm="xrt"):
        for _ in range(5):
            for name, fn in paths.items():
                for _ in range(50):
                    fn()
                torch.cuda.synchronize()
                begin = time.perf_counter()
                for _ in range(calls):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - begin) * 1e6 / calls)
                torch.cuda.synchronize()
    return best


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # run from a source tree
        return "source"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("."), help="directory of the JSON")
    parser.add_argument("--quick", action="store_true", help="fewer iterations, bf16 only")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("norms_bench needs a CUDA GPU")
    dtypes = ["bfloat16"] if args.quick else args.dtypes.split(",")
    iters = 5 if args.quick else 20
    props = torch.cuda.get_device_properties(0)
    environment = {
        "gpu": props.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "xpuruntime_core": _version("xpuruntime-core"),
    }
    print(f"{props.name} | torch {torch.__version__} | CUDA {torch.version.cuda}")
    copy_before = copy_bandwidth()
    results: list[dict[str, Any]] = []
    for name in dtypes:
        for h in WIDTHS:
            results += bench_width(DTYPES[name], h, iters)
            torch.cuda.empty_cache()
    copy_after = copy_bandwidth()
    copy = max(copy_before, copy_after)
    for entry in results:
        for who in ("ours", "torch"):
            gbs = entry["bytes"] / (entry[f"{who}_us"] * 1e-6) / 1e9
            entry[f"{who}_gbs"] = gbs
            entry[f"{who}_pct_copy"] = 100 * gbs / copy
    print(
        f"\ncopy bandwidth (read + write): {copy:.0f} GB/s "
        f"(before {copy_before:.0f}, after {copy_after:.0f})\n"
    )
    header = (
        f"{'norm':9} {'direction':16} {'dtype':8} {'h':>6} {'rows':>6} {'ours us':>9} "
        f"{'torch us':>9} {'speedup':>8} {'ours %copy':>10} {'torch %copy':>11}"
    )
    print(header)
    print("-" * len(header))
    for e in results:
        flag = " (host-bound)" if e["ours_host_bound"] or e["torch_host_bound"] else ""
        print(
            f"{e['norm']:9} {e['direction']:16} {e['dtype']:8} {e['h']:>6} {e['rows']:>6} "
            f"{e['ours_us']:>9.1f} {e['torch_us']:>9.1f} {e['speedup']:>7.2f}x "
            f"{e['ours_pct_copy']:>9.1f}% {e['torch_pct_copy']:>10.1f}%{flag}"
        )

    print("\nlaunch shapes (vectors of 16 B per thread, warps per row, rows per block):")
    seen = set()
    for e in results:
        key = (e["norm"], e["direction"], e["dtype"], e["h"])
        if e["direction"] != "residual forward" and key not in seen:
            seen.add(key)
            print(f"  {e['norm']:9} {e['direction']:8} {e['dtype']:8} {e['h']:>6}: {e['launch']}")

    summary: list[dict[str, Any]] = []
    print(
        f"\n{'norm':9} {'direction':16} {'dtype':8} {'geomean speedup':>16} {'min speedup':>12} "
        f"{'min %copy':>10}  target"
    )
    targets = {
        ("layernorm", "forward"): 1.3,
        ("rmsnorm", "forward"): 1.2,
        ("layernorm", "backward"): 1.3,
        ("rmsnorm", "backward"): 1.3,
    }
    for norm in ("layernorm", "rmsnorm"):
        for direction in ("forward", "residual forward", "backward"):
            for name in dtypes:
                group = [
                    e
                    for e in results
                    if (e["norm"], e["direction"], e["dtype"]) == (norm, direction, name)
                ]
                g = geomean([e["speedup"] for e in group])
                low = min(e["speedup"] for e in group)
                low_pct = min(e["ours_pct_copy"] for e in group)
                want = targets.get((norm, direction))
                checks = []
                if want is not None:
                    checks.append(f"geomean >= {want}x: {'met' if g >= want else 'NOT met'}")
                if direction == "forward":
                    checks.append(f"every h >= 85% copy: {'met' if low_pct >= 85 else 'NOT met'}")
                summary.append(
                    {
                        "norm": norm,
                        "direction": direction,
                        "dtype": name,
                        "geomean_speedup": g,
                        "min_speedup": low,
                        "min_pct_copy": low_pct,
                        "targets": checks,
                    }
                )
                print(
                    f"{norm:9} {direction:16} {name:8} {g:>15.2f}x {low:>11.2f}x "
                    f"{low_pct:>9.1f}%  {'; '.join(checks)}"
                )

    overhead = host_overhead(1000 if args.quick else 3000)
    kernel = overhead["raw kernel launch"]
    print(
        "\nhost time per call, bf16 1 x 1024 (overhead over the raw kernel launch; target <= 5 us):"
    )
    for name, us in overhead.items():
        print(f"  {name:40} {us:7.2f} us   +{us - kernel:6.2f} us")
    for entry in results:
        entry.pop("bytes")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "norms_bench.json"
    path.write_text(
        json.dumps(
            {
                "environment": environment,
                "copy_bandwidth_gbs": copy,
                "copy_bandwidth_runs_gbs": [copy_before, copy_after],
                "results": results,
                "summary": summary,
                "host_overhead_us": overhead,
                "host_overhead_over_kernel_us": {k: v - kernel for k, v in overhead.items()},
            },
            indent=2,
        )
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
