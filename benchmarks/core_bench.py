"""xpuruntime-core benchmarks (GPU): pool allocator, dispatcher, cuBLASLt matmul.

Every figure is a ratio against its peer measured in the same process and run:

- pool alloc+free vs cudaMalloc+cudaFree (both timed in C++ loops), and vs PyTorch's caching
  allocator (torch.empty + del, and torch.cuda.caching_allocator_alloc/delete) at equal sizes;
- cached dispatcher resolution in C++ (ns) and the Python call's overhead (µs);
- cuBLASLt bf16 matmul, square 4096..8192, vs torch.matmul (CUDA events, back-to-back
  batches, median of batches).

Run: python benchmarks/core_bench.py [--json PATH]   (prints a table, writes JSON)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def _ns_per_call(fn: Callable[[int], object], iterations: int) -> float:
    for i in range(min(1000, iterations)):
        fn(i)
    start = time.perf_counter_ns()
    for i in range(iterations):
        fn(i)
    return (time.perf_counter_ns() - start) / iterations


def bench_pool(torch: Any) -> dict[str, float]:
    from xpuruntime.runtime import memory
    from xpuruntime.runtime.native import core

    native = core()
    pool_ns = native.bench_pool_alloc_free_ns(SIZES, 200_000, 0)
    driver_ns = native.bench_driver_alloc_free_ns(SIZES, 2_000, 0)
    before = memory.stats()["driver_allocations"]

    import xpuruntime.runtime as rt

    n = len(SIZES)
    xrt_py_ns = _ns_per_call(lambda i: rt.empty([SIZES[i % n]], "uint8", "cuda"), 50_000)
    torch_py_ns = _ns_per_call(
        lambda i: torch.empty(SIZES[i % n], dtype=torch.uint8, device="cuda"), 50_000
    )
    stream = torch.cuda.current_stream().cuda_stream

    def torch_raw(i: int) -> None:
        ptr = torch.cuda.caching_allocator_alloc(SIZES[i % n], 0, stream)
        torch.cuda.caching_allocator_delete(ptr)

    torch_raw_ns = _ns_per_call(torch_raw, 50_000)
    after = memory.stats()["driver_allocations"]
    return {
        "pool_cpp_ns": pool_ns,
        "cudamalloc_cudafree_ns": driver_ns,
        "pool_vs_cudamalloc_speedup": driver_ns / pool_ns,
        "xrt_empty_python_ns": xrt_py_ns,
        "torch_empty_python_ns": torch_py_ns,
        "pool_vs_torch_empty_speedup": torch_py_ns / xrt_py_ns,
        "torch_caching_allocator_alloc_delete_ns": torch_raw_ns,
        "pool_cpp_vs_torch_caching_allocator_speedup": torch_raw_ns / pool_ns,
        "driver_allocations_during_python_loops": after - before,
    }


def bench_dispatcher(torch: Any) -> dict[str, float]:
    import xpuruntime.ops as ops
    import xpuruntime.runtime as rt
    from xpuruntime.runtime.native import core

    cpp_ns = core().bench_cached_resolve_ns(
        "matmul", [4096, 4096, 4096], "bfloat16", "cuda:0", "", "auto", "FirstSupported", 1_000_000
    )
    shape = [4096, 4096, 4096]
    rt.dispatcher.resolve("matmul", shape, "bfloat16", "cuda:0")
    py_ns = _ns_per_call(
        lambda _: rt.dispatcher.resolve("matmul", shape, "bfloat16", "cuda:0"), 100_000
    )
    # End-to-end host cost of one small op call (DLPack in and out, dispatch, pool, launch)
    # next to torch.matmul's; both enqueue only, synchronised once at the end.
    a = torch.randn(64, 64, device="cuda")
    op_ns = _ns_per_call(lambda _: ops.matmul(a, a), 20_000)
    torch.cuda.synchronize()
    torch_ns = _ns_per_call(lambda _: torch.matmul(a, a), 20_000)
    torch.cuda.synchronize()
    return {
        "cached_resolve_cpp_ns": cpp_ns,
        "resolve_python_call_ns": py_ns,
        "python_overhead_ns": py_ns - cpp_ns,
        "ops_matmul_64_call_ns": op_ns,
        "torch_matmul_64_call_ns": torch_ns,
    }


def _batched_ms(torch: Any, fn: Callable[[], object], batch: int, batches: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(batches):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) / batch)
    return float(statistics.median(per_call))


def _bench_matmul_size(torch: Any, n: int) -> dict[str, Any]:
    import xpuruntime.ops as ops
    from xpuruntime.policies import KernelPolicy

    lt = KernelPolicy(matmul="cublasLt")
    cublas = KernelPolicy(matmul="cublas")
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ref = torch.matmul(a, b)
    out = ops.matmul(a, b, policy=lt)  # first use: cuBLASLt candidates timed, best cached
    err = (out.float() - ref.float()).abs().max().item()
    algo = ops.last_decision().detail  # type: ignore[union-attr]
    batch = 20 if n < 8192 else 10
    # Alternate the peers so clock drift hits all alike; median over rounds.
    t_torch, t_lt, t_cublas = [], [], []
    for _ in range(3):
        t_torch.append(_batched_ms(torch, lambda: torch.matmul(a, b), batch, 5))
        t_lt.append(_batched_ms(torch, lambda: ops.matmul(a, b, policy=lt), batch, 5))
        t_cublas.append(_batched_ms(torch, lambda: ops.matmul(a, b, policy=cublas), batch, 5))
    ms_torch, ms_lt, ms_cublas = (statistics.median(t) for t in (t_torch, t_lt, t_cublas))
    flops = 2.0 * n**3
    return {
        "n": n,
        "torch_ms": ms_torch,
        "cublaslt_ms": ms_lt,
        "cublas_ms": ms_cublas,
        "cublaslt_vs_torch": ms_torch / ms_lt,
        "cublas_vs_torch": ms_torch / ms_cublas,
        "torch_tflops": flops / ms_torch / 1e9,
        "cublaslt_tflops": flops / ms_lt / 1e9,
        "max_abs_diff_vs_torch": err,
        "algorithm": algo,
    }


def bench_matmul(torch: Any) -> list[dict[str, Any]]:
    return [_bench_matmul_size(torch, n) for n in (4096, 6144, 8192)]


def bench_layernorm(torch: Any) -> dict[str, Any]:
    """xrt layernorm vs torch.nn.functional.layer_norm (bf16, 32768 x 8192), and as a share of
    the same run's device-to-device copy bandwidth (it reads x once and writes y once)."""
    import xpuruntime.ops as ops
    from xpuruntime.policies import KernelPolicy

    rows, d = 32768, 8192  # about 0.25 ms a call: large enough to hide host overhead
    x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    policy = KernelPolicy(layernorm="xrt")
    dst = torch.empty_like(x)
    fn = torch.nn.functional.layer_norm
    t_torch, t_xrt, t_copy = [], [], []
    for _ in range(3):
        t_torch.append(_batched_ms(torch, lambda: fn(x, (d,), w, b, 1e-5), 50, 5))
        t_xrt.append(_batched_ms(torch, lambda: ops.layernorm(x, w, b, 1e-5, policy=policy), 50, 5))
        t_copy.append(_batched_ms(torch, lambda: dst.copy_(x), 50, 5))
    ms_torch, ms_xrt, ms_copy = (statistics.median(t) for t in (t_torch, t_xrt, t_copy))
    moved = 2 * x.numel() * x.element_size()
    return {
        "shape": [rows, d],
        "torch_ms": ms_torch,
        "xrt_ms": ms_xrt,
        "xrt_vs_torch": ms_torch / ms_xrt,
        "copy_ms": ms_copy,
        "xrt_fraction_of_copy_bandwidth": ms_copy / ms_xrt,
        "copy_gbps": moved / ms_copy / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("core_bench.json"))
    args = parser.parse_args()
    import torch

    import xpuruntime.runtime as rt

    if not rt.cuda_available():
        print("core_bench needs a GPU and a CUDA build of xpuruntime-core", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "device": rt.get_all_devices()[0].name,
        "environment": rt.environment_fingerprint(),
        "torch": torch.__version__,
        "pool": bench_pool(torch),
        "dispatcher": bench_dispatcher(torch),
        "matmul_bf16": bench_matmul(torch),
        "layernorm_bf16": bench_layernorm(torch),
    }
    args.json.write_text(json.dumps(result, indent=2))

    p, d = result["pool"], result["dispatcher"]
    print(f"device: {result['device']}  torch {result['torch']}")
    print(f"{'measure':58} {'value':>14}")
    lines = [
        ("pool alloc+free, C++ (ns)", p["pool_cpp_ns"]),
        ("cudaMalloc+cudaFree, C++ (ns)", p["cudamalloc_cudafree_ns"]),
        ("  pool speed-up vs cudaMalloc+cudaFree (target >= 20x)", p["pool_vs_cudamalloc_speedup"]),
        ("rt.empty+del, Python (ns)", p["xrt_empty_python_ns"]),
        ("torch.empty+del, Python (ns)", p["torch_empty_python_ns"]),
        ("  pool speed-up vs torch.empty (target >= 1x)", p["pool_vs_torch_empty_speedup"]),
        ("torch caching_allocator_alloc+delete (ns)", p["torch_caching_allocator_alloc_delete_ns"]),
        (
            "  C++ pool speed-up vs torch raw allocator calls",
            p["pool_cpp_vs_torch_caching_allocator_speedup"],
        ),
        ("driver allocations during the Python loops", p["driver_allocations_during_python_loops"]),
        ("cached dispatcher resolution, C++ (ns, target < 500)", d["cached_resolve_cpp_ns"]),
        ("rt.dispatcher.resolve from Python (ns)", d["resolve_python_call_ns"]),
        ("  Python call overhead (ns)", d["python_overhead_ns"]),
        ("xpuruntime.ops.matmul 64x64 fp32, host time per call (ns)", d["ops_matmul_64_call_ns"]),
        ("torch.matmul 64x64 fp32, host time per call (ns)", d["torch_matmul_64_call_ns"]),
    ]
    for name, value in lines:
        print(f"{name:58} {value:14.2f}")
    print(
        f"\n{'n':>5} {'torch ms':>9} {'Lt ms':>9} {'cublas ms':>9} {'Lt/torch':>9} {'cublas/torch':>12} {'Lt TFLOP/s':>10}  algorithm"
    )
    for r in result["matmul_bf16"]:
        print(
            f"{r['n']:>5} {r['torch_ms']:9.4f} {r['cublaslt_ms']:9.4f} {r['cublas_ms']:9.4f} "
            f"{r['cublaslt_vs_torch']:9.3f} {r['cublas_vs_torch']:12.3f} {r['cublaslt_tflops']:10.1f}  {r['algorithm']}"
        )
    ln = result["layernorm_bf16"]
    print(
        f"\nlayernorm bf16 {ln['shape']}: torch {ln['torch_ms']:.4f} ms, xrt {ln['xrt_ms']:.4f} ms, "
        f"xrt/torch {ln['xrt_vs_torch']:.3f}, xrt at {ln['xrt_fraction_of_copy_bandwidth']:.2f} of "
        f"copy bandwidth ({ln['copy_gbps']:.0f} GB/s copy)"
    )
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
