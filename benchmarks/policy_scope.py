"""What a kernel-policy scope costs on the host: ``set_kernel_policy`` and ``kernel_policy``.

    python benchmarks/policy_scope.py [--rounds N] [--calls N] [--out DIR]

Times, in one process, per call (best of ``--rounds`` rounds of ``--calls`` calls, so a
noisy machine's slow rounds do not count):

* ``nullcontext``: ``with contextlib.nullcontext(): pass``, the baseline every ratio is
  against (what an empty ``with`` costs in this Python);
* ``kernel_policy(attention="math")``: entering and leaving the scope;
* ``kernel_policy(KernelPolicy)``: the same with a policy object;
* ``set_kernel_policy(attention="math")``: setting the process-wide policy (same value each
  call, as a training loop that sets it per step does);
* ``layered_policy()``: the layering alone (defaults < environment), the part that reads
  ``XPURUNTIME_POLICY_*``.

The environment does not change between calls (the target case: a scope costs <= 20 us).
Prints a table and writes policy_scope.json to ``--out`` (default: the current folder).
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

from xpuruntime.policies import KernelPolicy, layered_policy
from xpuruntime.pytorch import clear_kernel_policy, kernel_policy, set_kernel_policy

TARGET_US = 20.0


def _best_us(fn: Callable[[], Any], rounds: int, calls: int) -> float:
    """Best per-call microseconds over ``rounds`` rounds of ``calls`` calls."""
    fn()  # first call: caches, imports
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1e3)
    return best


def _null() -> None:
    with contextlib.nullcontext():
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
    'kernel_policy(attention="math")': _scope_keywords,
    "kernel_policy(KernelPolicy(...))": _scope_object,
    'set_kernel_policy(attention="math")': _set,
    "layered_policy() alone": _layering,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    timings = {}
    for name, fn in CASES.items():
        timings[name] = _best_us(fn, args.rounds, args.calls)
        clear_kernel_policy()
    base = next(iter(timings.values()))
    print(f"{'case':<38} {'us/call':>10} {'x baseline':>11}  target <= {TARGET_US:g} us")
    results = []
    for index, (name, us) in enumerate(timings.items()):
        meets = "" if index == 0 else ("met" if us <= TARGET_US else "MISSED")
        results.append({"case": name, "us": round(us, 3), "ratio": round(us / base, 2)})
        print(f"{name:<38} {us:>10.2f} {us / base:>10.1f}x  {meets}")
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
