"""Host time of the Gluon Hopper forward's launch on an H100/H200, two ways in one process.

    python3 packages/xpuruntime-core/scripts/hopper_launch_host_time.py

- ``wrapper``: the kept compiled kernel launched through its ``[grid]`` wrapper with Gluon
  ``TensorDescriptor`` arguments (how the forward launched before
  :mod:`xpuruntime.kernels.attention.gluon_launch`, less that launcher's own cache-key work,
  so its figure is a lower bound);
- ``direct``: :func:`.gluon_launch.launch` (the kept kernel's own launcher, light
  descriptors);

each alone and inside the whole forward (``hopper_attention_forward``: checks, allocation,
launch), at a size whose kernel is shorter than the host work (1x16x128x128 bf16). The four
are interleaved, seven rounds of 2000 calls; prints the best and median µs per call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from xpuruntime.kernels.attention import gluon_launch, hopper


def _captured_launch(q: torch.Tensor) -> dict[str, Any]:
    """The arguments the forward passes to gluon_launch.launch for ``q``."""
    captured: dict[str, Any] = {}
    real = gluon_launch.launch

    def spy(fn: Any, grid: Any, args: Any, constants: Any) -> None:
        captured.update(fn=fn, grid=grid, args=args, constants=constants)
        real(fn, grid, args, constants)

    gluon_launch.launch = spy
    try:
        hopper.hopper_attention_forward(q, q, q, causal=False)
    finally:
        gluon_launch.launch = real
    return captured


def main() -> None:
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        raise SystemExit("needs an H100/H200 (sm_90)")
    q = torch.randn(1, 16, 128, 128, device="cuda", dtype=torch.bfloat16)
    hopper.hopper_attention_forward(q, q, q, causal=False)  # compiles and keeps the kernel
    c = _captured_launch(q)
    # This process compiled one kind of the forward: its one kept kernel.
    (entry,) = (e for key, e in gluon_launch._compiled.items() if key[0] == id(c["fn"]))
    kernel, constants = entry
    real = gluon_launch.launch

    def wrapper() -> None:
        values = [
            gluon_launch._gluon_descriptor(a) if isinstance(a, gluon_launch.Tma) else a
            for a in c["args"]
        ]
        stream = torch.cuda.current_stream().cuda_stream
        kernel[(*c["grid"], 1, 1)[:3]](*values, *constants, stream=stream)

    def direct() -> None:
        real(c["fn"], c["grid"], c["args"], c["constants"])

    def forward_wrapper() -> None:
        gluon_launch.launch = lambda *args: wrapper()
        try:
            hopper.hopper_attention_forward(q, q, q, causal=False)
        finally:
            gluon_launch.launch = real

    def forward_direct() -> None:
        hopper.hopper_attention_forward(q, q, q, causal=False)

    cases: dict[str, Callable[[], None]] = {
        "launch: wrapper": wrapper,
        "launch: direct": direct,
        "forward: wrapper": forward_wrapper,
        "forward: direct": forward_direct,
    }

    def us_per_call(fn: Callable[[], None], calls: int = 2000) -> float:
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        elapsed = (time.perf_counter_ns() - start) / calls / 1000
        torch.cuda.synchronize()
        return elapsed

    for fn in cases.values():
        for _ in range(300):
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(7):
        for name, fn in cases.items():
            times[name].append(us_per_call(fn))
    for name, samples in times.items():
        print(f"{name:18s} best {min(samples):6.1f}  median {statistics.median(samples):6.1f} µs")


if __name__ == "__main__":
    main()
