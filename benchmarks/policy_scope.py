"""What a kernel-policy scope costs on the host: ``set_kernel_policy`` and ``kernel_policy``.

    python benchmarks/policy_scope.py [--rounds N] [--calls N] [--out DIR]

Times, in one process, per call (best of ``--rounds`` rounds of ``--calls`` calls, so a
noisy machine's slow rounds do not count):

* ``nullcontext``: ``with contextlib.nullcontext(): pass``, the baseline every ratio is
  against (what an empty ``with`` costs in this Python);
* ``sdpa_kernel(SDPBackend.MATH)``: PyTorch's own scope over the same SDPA switches, for
  scale (what flipping them and back costs without any policy, record or verification);
* ``kernel_policy(attention="math")``: entering and leaving the scope;
* ``kernel_policy(KernelPolicy)``: the same with a policy object;
* ``set_kernel_policy(attention="math")``: setting the process-wide policy (same value each
  call, as a training loop that sets it per step does);
* ``layered_policy()``: the layering alone (defaults < environment), the part that reads
  ``XPURUNTIME_POLICY_*``.

The environment does not change between calls (the target case: a scope costs <= 20 us).
Each case is timed by the wall clock and by this thread's CPU time (the second is what the
call costs even on a machine whose cores other processes share). Prints a table and writes
policy_scope.json to ``--out`` (default: the current folder).
Runs on any machine with PyTorch (CPU is enough; the switches it writes are PyTorch's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from xpuruntime.policies import KernelPolicy, layered_policy
from xpuruntime.pytorch import clear_kernel_policy, kernel_policy, set_kernel_policy

TARGET_US = 20.0


def _best_us(fn: Callable[[], Any], rounds: int, calls: int) -> tuple[float, float]:
    """Best per-call microseconds over ``rounds`` rounds of ``calls`` calls: wall clock, and
    this thread's CPU time (what the call costs even while other processes share the cores:
    time spent descheduled does not count)."""
    fn()  # first call: caches, imports
    wall = cpu = float("inf")
    for _ in range(rounds):
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(calls):
            fn()
        cpu = min(cpu, (time.thread_time_ns() - start_cpu) / calls / 1e3)
        wall = min(wall, (time.perf_counter_ns() - start) / calls / 1e3)
    return wall, cpu


def _null() -> None:
    with contextlib.nullcontext():
        pass


def _torch_scope() -> None:
    with sdpa_kernel(SDPBackend.MATH):
        pass


def _scope_keywords() -> None:
    with kernel_policy(attention="math"):
        pass


_POLICY = KernelPolicy(attention="math", linear="auto")


def _scope_object() -> None:
    with kernel_policy(_POLICY):
        pass


def _set() -> None:
    set_kernel_policy(attention="math")


def _layering() -> None:
    layered_policy(None, environ=os.environ)


CASES: dict[str, Callable[[], None]] = {
    "nullcontext (baseline)": _null,
    "torch sdpa_kernel(MATH) (PyTorch's scope)": _torch_scope,
    'kernel_policy(attention="math")': _scope_keywords,
    "kernel_policy(KernelPolicy(...))": _scope_object,
    'set_kernel_policy(attention="math")': _set,
    "layered_policy() alone": _layering,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    timings = {}
    for name, fn in CASES.items():
        timings[name] = _best_us(fn, args.rounds, args.calls)
        clear_kernel_policy()
    base_wall, base_cpu = next(iter(timings.values()))
    print(
        f"{'case':<42} {'wall us':>9} {'x base':>8} {'cpu us':>9} {'x base':>8}"
        f"  target <= {TARGET_US:g} us"
    )
    results = []
    for index, (name, (wall, cpu)) in enumerate(timings.items()):
        meets = "" if index < 2 else ("met" if min(wall, cpu) <= TARGET_US else "MISSED")
        results.append(
            {
                "case": name,
                "wall_us": round(wall, 3),
                "wall_ratio": round(wall / base_wall, 2),
                "cpu_us": round(cpu, 3),
                "cpu_ratio": round(cpu / base_cpu, 2),
            }
        )
        print(
            f"{name:<42} {wall:>9.2f} {wall / base_wall:>7.1f}x {cpu:>9.2f}"
            f" {cpu / base_cpu:>7.1f}x  {meets}"
        )
    report = {
        "benchmark": "policy_scope",
        "target_us": TARGET_US,
        "rounds": args.rounds,
        "calls": args.calls,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "policy_scope.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
