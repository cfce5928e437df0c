"""xpuruntime.pytorch on a CUDA GPU: graphed training step and the core pool as allocator.

    python benchmarks/torch_bench.py [--out DIR] [--quick]

1. A small MLP training step (forward, backward, Adam step) three ways, interleaved in one
   process: eager PyTorch, ``torch.cuda.make_graphed_callables`` (forward/backward graphed,
   optimizer eager) and ``xpuruntime.pytorch.graph_step`` (whole step graphed).
   Targets: graph_step >= 1.7x eager and >= 0.98x make_graphed_callables.
2. The same training loop in fresh processes (PyTorch can swap its allocator only before
   CUDA starts) with PyTorch's caching allocator and with the core's pool
   (``xpuruntime.pytorch.set_allocator()``), alternating. Targets: throughput >= 0.98x,
   peak reserved <= 1.1x.
3. Which kernels ran for a matmul under ``matmul="cublas"`` and ``"cublasLt"``, and for
   attention under ``attention="flash_v2"`` (``xpuruntime.pytorch.explain``).

Prints a table and writes ``torch_bench.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

BATCH, FEATURES, HIDDEN, LAYERS, CLASSES = 64, 256, 256, 4, 10


def _mlp() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    width = FEATURES
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(width, HIDDEN), torch.nn.ReLU()]
        width = HIDDEN
    layers.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*layers).cuda()


def _time_steps(step: Callable[[], Any], steps: int) -> float:
    """Microseconds per step over ``steps`` back-to-back steps (CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / steps


def bench_graphs(repeats: int, steps: int) -> dict[str, Any]:
    import xpuruntime.pytorch as xrt_torch

    torch.manual_seed(0)
    x = torch.randn(BATCH, FEATURES, device="cuda")
    y = torch.randint(0, CLASSES, (BATCH,), device="cuda")
    base = _mlp()

    eager_model = copy.deepcopy(base)
    eager_opt = torch.optim.Adam(eager_model.parameters(), lr=1e-3)

    def eager_step() -> torch.Tensor:
        eager_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(eager_model(x), y)
        loss.backward()
        eager_opt.step()
        return loss

    callables_model = copy.deepcopy(base)
    callables_opt = torch.optim.Adam(callables_model.parameters(), lr=1e-3)
    graphed_model = torch.cuda.make_graphed_callables(callables_model, (x,))

    def callables_step() -> torch.Tensor:
        callables_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(graphed_model(x), y)
        loss.backward()
        callables_opt.step()
        return loss

    xrt_model = copy.deepcopy(base)
    xrt_opt = torch.optim.Adam(xrt_model.parameters(), lr=1e-3, capturable=True)

    def whole_step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        xrt_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(xrt_model(inputs), targets)
        loss.backward()
        xrt_opt.step()
        return loss

    graphed = xrt_torch.graph_step(whole_step, (x, y), warmup_iters=3)

    def xrt_step() -> torch.Tensor:
        return graphed(x, y)

    first_loss = float(xrt_step().item())
    variants = {
        "eager": eager_step,
        "make_graphed_callables": callables_step,
        "graph_step": xrt_step,
    }
    for step in variants.values():  # warm-up (lazy init, optimizer state, autotuning)
        _time_steps(step, 20)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, step in variants.items():  # interleaved: drift hits all equally
            samples[name].append(_time_steps(step, steps))
    median = {name: statistics.median(values) for name, values in samples.items()}
    last_loss = float(xrt_step().item())
    return {
        "config": {
            "batch": BATCH,
            "features": FEATURES,
            "hidden": HIDDEN,
            "layers": LAYERS,
            "optimizer": "Adam",
            "repeats": repeats,
            "steps_per_repeat": steps,
        },
        "us_per_step_median": median,
        "us_per_step_samples": samples,
        "speedup_vs_eager": median["eager"] / median["graph_step"],
        "ratio_vs_make_graphed_callables": median["make_graphed_callables"] / median["graph_step"],
        "graph_step_trains": last_loss < first_loss,
    }


ALLOCATOR_WORKER = r"""
import json, statistics, sys, time, torch
import torch.nn.functional as F
mode = sys.argv[1]
if mode == "xrt":
    import xpuruntime.pytorch as xrt_torch
    xrt_torch.set_allocator()
free_before, total = torch.cuda.mem_get_info()
torch.manual_seed(0)
blocks = []
for _ in range(4):
    blocks += [torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)]
model = torch.nn.Sequential(*blocks, torch.nn.Linear(1024, 100)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step(batch):
    x = torch.randn(batch, 1024, device="cuda")
    y = torch.randint(0, 100, (batch,), device="cuda")
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
batches = [int(b) for b in sys.argv[3].split(",")]
for i in range(12):
    step(batches[i % len(batches)])
torch.cuda.synchronize()
chunks = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    for i in range(24):
        step(batches[i % len(batches)])
    torch.cuda.synchronize()
    chunks.append(24 / (time.perf_counter() - start))
free_after, _ = torch.cuda.mem_get_info()
if mode == "xrt":
    stats = xrt_torch.allocator_stats()
    peak_reserved = stats["peak_reserved"]
else:
    stats = {k: v for k, v in torch.cuda.memory_stats().items() if k.startswith(("reserved_bytes.all", "num_alloc_retries", "num_device_alloc"))}
    peak_reserved = torch.cuda.max_memory_reserved()
print(json.dumps({"mode": mode, "steps_per_s": statistics.median(chunks),
                  "steps_per_s_samples": chunks, "peak_reserved": peak_reserved,
                  "device_bytes_used": free_before - free_after, "stats": stats}))
"""


def bench_allocator(rounds: int, chunks: int, batches: list[int]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"torch": [], "xrt": []}
    batch_arg = ",".join(str(b) for b in batches)
    for _ in range(rounds):
        for mode in ("torch", "xrt"):
            result = subprocess.run(
                [sys.executable, "-c", ALLOCATOR_WORKER, mode, str(chunks), batch_arg],
                capture_output=True,
                text=True,
                timeout=300,
                env=os.environ.copy(),
            )
            if result.returncode != 0:
                raise RuntimeError(f"{mode} allocator worker failed:\n{result.stderr}")
            runs[mode].append(json.loads(result.stdout.strip().splitlines()[-1]))
    throughput = {m: statistics.median(r["steps_per_s"] for r in runs[m]) for m in runs}
    peak = {m: max(r["peak_reserved"] for r in runs[m]) for m in runs}
    used = {m: max(r["device_bytes_used"] for r in runs[m]) for m in runs}
    return {
        "batches": batches,
        "runs": runs,
        "steps_per_s": throughput,
        "peak_reserved_bytes": peak,
        "device_bytes_used": used,
        "throughput_ratio": throughput["xrt"] / throughput["torch"],
        "peak_reserved_ratio": peak["xrt"] / peak["torch"],
    }


def probe_kernels() -> dict[str, Any]:
    import xpuruntime.pytorch as xrt_torch

    out: dict[str, Any] = {}
    for dtype in (torch.float32, torch.float16):
        a = torch.randn(1024, 1024, device="cuda", dtype=dtype)
        for blas in ("cublas", "cublasLt"):
            with xrt_torch.kernel_policy(matmul=blas):
                record = xrt_torch.explain(
                    lambda a=a: (a @ a, torch.nn.functional.linear(a, a, a[0]))
                )
            out[f"matmul_{blas}_{str(dtype)[6:]}"] = [
                {"name": k.name, "op": k.op, "library": k.library, "count": k.count}
                for k in record.kernels
            ]
    q = torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    with xrt_torch.kernel_policy(attention="flash_v2"):
        record = xrt_torch.explain(
            lambda: xrt_torch.ops.fused_attention(q, q, q, is_causal=True).sum().backward()
        )
    out["attention_flash_v2_fwd_bwd"] = [
        {"name": k.name, "op": k.op, "library": k.library, "count": k.count} for k in record.kernels
    ]
    out["attention_flash_v2_nodes"] = [
        {"name": n.name, "op": n.op_type, "kernel": (n.kernel or "")[:60]} for n in record.nodes
    ]
    # which profiler events the flash kernels hang off (their correlation ids)
    with (
        xrt_torch.kernel_policy(attention="flash_v2"),
        torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof,
    ):
        xrt_torch.ops.fused_attention(q, q, q, is_causal=True).sum().backward()
        torch.cuda.synchronize()
    out["attention_flash_v2_attachments"] = [
        {"event": e.name, "id": e.id, "kernel": k.name[:60]}
        for e in prof.events()
        for k in e.kernels
        if "flash" in k.name
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit(f"needs a CUDA GPU; torch {torch.__version__} sees none")
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    results["graphs"] = bench_graphs(repeats=10 if args.quick else 30, steps=50)
    # A fixed batch is the usual training loop; changing batch sizes stress block reuse.
    results["allocator"] = bench_allocator(rounds=1 if args.quick else 2, chunks=5, batches=[512])
    results["allocator_varying_batch"] = bench_allocator(
        rounds=1, chunks=5, batches=[256, 512, 384, 128, 512, 256]
    )
    results["kernels"] = probe_kernels()

    g, a = results["graphs"], results["allocator"]
    v = results["allocator_varying_batch"]
    rows = [
        ("graph_step vs eager (speedup)", g["speedup_vs_eager"], ">= 1.7"),
        ("graph_step vs make_graphed_callables", g["ratio_vs_make_graphed_callables"], ">= 0.98"),
        ("core pool throughput vs torch (fixed batch)", a["throughput_ratio"], ">= 0.98"),
        ("core pool peak reserved vs torch (fixed batch)", a["peak_reserved_ratio"], "<= 1.1"),
        ("core pool throughput vs torch (varying batch)", v["throughput_ratio"], ">= 0.98"),
        ("core pool peak reserved vs torch (varying batch)", v["peak_reserved_ratio"], "<= 1.1"),
    ]
    print(f"device: {results['device']}  torch {results['torch']}")
    print(f"{'metric':45} {'value':>8}  target")
    for name, value, target in rows:
        print(f"{name:45} {value:8.3f}  {target}")
    for name, us in g["us_per_step_median"].items():
        print(f"  {name:25} {us:9.1f} us/step")
    for label, bench in (("fixed", a), ("varying", v)):
        for mode in ("torch", "xrt"):
            print(
                f"  allocator {label:7} {mode:6} {bench['steps_per_s'][mode]:8.1f} steps/s  "
                f"peak reserved {bench['peak_reserved_bytes'][mode] / 2**20:8.1f} MiB"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "torch_bench.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
