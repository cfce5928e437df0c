#!/usr/bin/env python3
"""Decision lockfile on the GPU: record once, replay in fresh processes (one command).

1. cuBLASLt grid: matmul shapes x dtypes run once each under ``BestPerformance`` with
   ``lock="record"`` (kernels and cuBLASLt algorithms timed), then replayed in 3 new processes
   with ``lock="replay"``. Every replay must choose exactly the recorded kernel and algorithm
   configuration for every signature, with status ``locked`` and no fallback.
2. First-call time: the summed wall time of each grid shape's first call (synchronised) in
   record mode against replay mode. Both processes first warm the library up on a shape of
   their own, so the ratio is timing versus no timing. Target: replay >= 5x faster.
3. SDPA: ``fused_attention`` on CUDA over shapes, dtypes, masks and causal flags with the
   PyTorch extension recording PyTorch's backend per call signature; replayed in a new
   process, each signature must run the recorded backend (status ``locked``).

Needs a CUDA build of xpuruntime-core and PyTorch with CUDA (the project's device machine).
About a minute on an H100:

    python benchmarks/lock_replay.py [--json lock_replay.json] [--replays 3]

Exit status 0 when every check holds; the figures are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = (256, 1024, 4096)
DTYPES = ("float16", "bfloat16")
WARMUP_SHAPE = (192, 192, 192)
SDPA_CASES = [
    # (batch, heads, seq, head_dim, dtype, causal, mask)
    (2, 8, 128, 64, "float16", False, False),
    (2, 8, 1024, 64, "float16", True, False),
    (1, 16, 512, 128, "bfloat16", False, False),
    (4, 8, 256, 64, "float16", False, True),
    (2, 4, 64, 256, "float32", False, False),
]


def _grid() -> list[tuple[int, int, int, str]]:
    return [(m, k, n, dtype) for m in SIZES for k in SIZES for n in SIZES for dtype in DTYPES]


# -- worker processes ------------------------------------------------------------------------


def _matmul_worker(mode: str, lock: str) -> dict[str, Any]:
    import torch

    import xpuruntime.ops as ops
    from xpuruntime.policies import BestPerformance, ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime import lock as core_lock
    from xpuruntime.runtime.dispatch import dispatcher

    kernel_policy = KernelPolicy(strategy=BestPerformance)
    policy = ExecutionPolicy(
        kernel_policy=kernel_policy,
        lock=mode,
        lock_file=lock,
        fallback="error",  # type: ignore[arg-type]
    )
    torch.manual_seed(0)
    first_call_ms: dict[str, float] = {}
    with core_lock.use(policy):
        m, k, n = WARMUP_SHAPE  # library handles, workspaces, CUDA context: not timed
        warm = torch.randn(m, k, device="cuda", dtype=torch.float16)
        ops.matmul(
            warm, torch.randn(k, n, device="cuda", dtype=torch.float16), policy=kernel_policy
        )
        torch.cuda.synchronize()
        for m, k, n, dtype in _grid():
            a = torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype))
            b = torch.randn(k, n, device="cuda", dtype=getattr(torch, dtype))
            torch.cuda.synchronize()
            start = time.perf_counter()
            ops.matmul(a, b, policy=kernel_policy)
            torch.cuda.synchronize()
            first_call_ms[f"{dtype} {m}x{k}x{n}"] = (time.perf_counter() - start) * 1e3
        decisions = [
            {
                "signature": f"{d['op']} {d['dtype']} {d['shape']} {d['layout']}",
                "kernel": d["kernel"],
                "algorithm": d["algorithm"],
                "status": d["status"],
                "candidates": len(d.get("candidates") or []),
            }
            for d in dispatcher.export_decisions()
        ]
    return {"first_call_ms": first_call_ms, "decisions": decisions}


def _sdpa_worker(mode: str, lock: str) -> dict[str, Any]:
    import torch

    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.pytorch.ops import fused_attention

    xrt_torch.set_kernel_policy(
        exec_policy=ExecutionPolicy(lock=mode, lock_file=lock, fallback="error")  # type: ignore[arg-type]
    )
    torch.manual_seed(0)
    for batch, heads, seq, dim, dtype, causal, masked in SDPA_CASES:
        q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=getattr(torch, dtype))
        mask = torch.zeros(seq, seq, device="cuda", dtype=q.dtype) if masked else None
        fused_attention(q, q, q, attn_mask=mask, is_causal=causal)
    torch.cuda.synchronize()
    record = xrt_torch.current_record()
    return {
        "decisions": sorted(
            [d.shape, d.dtype, d.kernel, d.status]
            for d in record.decisions
            if d.op == "attention" and d.shape
        ),
        "fallbacks": [f"{f.what}: {f.reason}" for f in record.fallbacks],
    }


def _run_worker(kind: str, mode: str, lock: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", kind, "--mode", mode, "--lock", str(lock)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} {mode} worker failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the orchestration -----------------------------------------------------------------------


def _algorithms(result: dict[str, Any]) -> dict[str, Any]:
    return {d["signature"]: (d["kernel"], d["algorithm"]) for d in result["decisions"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", choices=["matmul", "sdpa"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["record", "replay"], help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work = _matmul_worker if args.worker == "matmul" else _sdpa_worker
        print(json.dumps(work(args.mode, args.lock)))
        return 0

    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="xpuruntime-lock-bench-") as tmp:
        matmul_lock = Path(tmp) / "matmul.lock.json"
        started = time.perf_counter()
        recorded = _run_worker("matmul", "record", matmul_lock)
        replays = [_run_worker("matmul", "replay", matmul_lock) for _ in range(args.replays)]
        expected = _algorithms(recorded)
        identical = [_algorithms(r) == expected for r in replays]
        all_locked = [all(d["status"] == "locked" for d in r["decisions"]) for r in replays]
        timed = sum(d["candidates"] > 1 for d in recorded["decisions"])
        record_ms = sum(recorded["first_call_ms"].values())
        replay_ms = [sum(r["first_call_ms"].values()) for r in replays]
        speedup = record_ms / max(replay_ms)
        checks["cublaslt grid: identical algorithms in every replay"] = all(identical)
        checks["cublaslt grid: every replayed decision locked"] = all(all_locked)
        checks["first call: replay >= 5x faster than record (BestPerformance)"] = speedup >= 5.0

        sdpa_lock = Path(tmp) / "sdpa.lock.json"
        sdpa_recorded = _run_worker("sdpa", "record", sdpa_lock)
        sdpa_replayed = _run_worker("sdpa", "replay", sdpa_lock)
        recorded_backends = {(s, t): k for s, t, k, _ in sdpa_recorded["decisions"]}
        replayed_backends = {(s, t): k for s, t, k, _ in sdpa_replayed["decisions"]}
        checks["sdpa: same backend per shape on replay"] = recorded_backends == replayed_backends
        checks["sdpa: every replayed call locked, no fallback"] = (
            all(status == "locked" for *_, status in sdpa_replayed["decisions"])
            and not sdpa_replayed["fallbacks"]
        )
        elapsed = time.perf_counter() - started

    figures = {
        "grid_signatures": len(expected),
        "signatures_with_timed_candidates": timed,
        "first_call_total_ms": {"record": record_ms, "replay": replay_ms},
        "first_call_speedup": speedup,
        "replays_identical": identical,
        "sdpa_backends": {f"{s} {t}": k for (s, t), k in sorted(recorded_backends.items())},
        "checks": checks,
        "seconds": elapsed,
    }
    print(f"cuBLASLt grid: {len(expected)} signatures, {timed} chose among timed candidates")
    print(
        f"first calls: record {record_ms:.1f} ms, replay "
        + ", ".join(f"{ms:.1f}" for ms in replay_ms)
        + f" ms -> {speedup:.1f}x"
    )
    for (shape, dtype), backend in sorted(recorded_backends.items()):
        print(f"sdpa {dtype} {shape}: {backend} (replay: {replayed_backends.get((shape, dtype))})")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    print(f"total {elapsed:.1f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
