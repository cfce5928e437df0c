"""Where the host time of one ``ops.attention`` call goes on an H100/H200, layer by layer.

    python3 packages/xpuruntime-core/scripts/attention_host_time.py [--pstats PATH]

At a size whose kernel is shorter than the host work (1x16x128x128 bf16, causal), each
layer of the user's forward is called back to back, 2000 calls a sample, the layers
interleaved over seven rounds; prints the best and median µs per call of:

- ``sdpa``: ``F.scaled_dot_product_attention`` with the cuDNN backend (the peer);
- ``ops.attention``: the user's entry under a policy naming ``xrt_flash_hopper``;
- ``launch.hopper_forward``: below the op layer (no decision, no note);
- ``hopper_attention_forward_run``: below the layout views and the output allocation;
- ``gluon_launch.launch``: the kernel's launch alone, with the arguments the forward built,
  through the launcher's per-argument key;
- ``Kept.launch``: the same launch through the kept kernel, with the arguments built;
- ``Bound.launch``: the same launch laid out once, new addresses read per launch, as a
  repeated call launches it (``gluon_launch.Bound``), on the same tensors (every tensor map
  taken from the last launch, as in a loop over one layer) and alternating between two
  sets of tensors (every map encoded anew, as layers of one shape in turn);
- ``repeat key``: a repeated call's key alone (``hopper._repeat_key``);
- ``resolve``: the op layer's decision alone (``ops.attention._resolve``);
- ``op checks``: the op layer's checks of its inputs alone (``ops.attention._torch`` and
  ``_dims``);
- ``alloc ...``: the output and log-sum-exp allocations alone, in three forms: with
  ``torch.empty``'s keywords, with ``new_empty``, and with ``empty_like`` (contiguous) for the
  output, as the forward allocates them.

Then ``cProfile`` over 2000 ``ops.attention`` calls: the 30 functions of most own time
(written to ``--pstats`` for ``python -m pstats``).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import itertools
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from xpuruntime import ops
from xpuruntime.kernels.attention import gluon_launch, hopper, launch
from xpuruntime.policies import KernelPolicy

# The module (xpuruntime.ops re-exports its function under the same name).
attention_op = importlib.import_module("xpuruntime.ops.attention")


def _captured_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, Any]:
    """The arguments the forward passes to gluon_launch.launch for ``q``, ``k``, ``v``."""
    captured: dict[str, Any] = {}
    real = gluon_launch.launch

    def spy(fn: Any, grid: Any, args: Any, constants: Any, **options: Any) -> None:
        captured.update(fn=fn, grid=grid, args=args, constants=constants, options=options)
        real(fn, grid, args, constants, **options)

    gluon_launch.launch = spy
    try:
        hopper.hopper_attention_forward(q, k, v, causal=True)
    finally:
        gluon_launch.launch = real
    return captured


def _us_per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    elapsed = (time.perf_counter_ns() - start) / calls / 1000
    torch.cuda.synchronize()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pstats", default="attention_host_time.pstats")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        raise SystemExit("needs an H100/H200 (sm_90)")
    q, k, v = (torch.randn(1, 16, 128, 128, device="cuda", dtype=torch.bfloat16) for _ in "qkv")
    policy = KernelPolicy(attention="xrt_flash_hopper")
    c = _captured_launch(q, k, v)
    kept = gluon_launch.launch(c["fn"], c["grid"], c["args"], c["constants"], **c["options"])
    if kept is None:
        raise SystemExit("Triton kept no compiled kernel (its interpreter, or pre-run hooks)")
    print(f"kept kernel launched {'directly' if kept.direct else 'through CompiledKernel.run'}")
    sources = (q, k, v, c["args"][4], c["args"][5])  # the output and lse follow the inputs
    turns = itertools.cycle((sources, tuple(torch.zeros_like(x) for x in sources)))
    bound = kept.bind(c["grid"], c["args"], sources)
    if bound is None:
        raise SystemExit("the kept kernel does not launch directly: nothing to bind")
    dims = attention_op._dims(q, k, v, "bhsd", False)
    cases: dict[str, Callable[[], object]] = {
        "sdpa (cuDNN)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "ops.attention": lambda: ops.attention(q, k, v, causal=True, layout="bhsd", policy=policy),
        "launch.hopper_forward": lambda: launch.hopper_forward(
            q, k, v, causal=True, scale=None, layout="bhsd"
        ),
        "hopper_attention_forward_run": lambda: hopper.hopper_attention_forward_run(
            q, k, v, causal=True
        ),
        "gluon_launch.launch": lambda: gluon_launch.launch(
            c["fn"], c["grid"], c["args"], c["constants"], **c["options"]
        ),
        "Kept.launch": lambda: kept.launch(c["grid"], c["args"]),
        "Bound.launch": lambda: bound.launch(sources),
        "Bound.launch, new addresses": lambda: bound.launch(next(turns)),
        "repeat key": lambda: hopper._repeat_key(q, k, v, None, True, None, None, None),
        "resolve": lambda: attention_op._resolve(q, dims, None, True, policy),
        "op checks": lambda: attention_op._dims(
            attention_op._torch(q, "q"),
            attention_op._torch(k, "k"),
            attention_op._torch(v, "v"),
            "bhsd",
            False,
        ),
        "alloc torch.empty(kwargs) x2": lambda: (
            torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(q.shape[:3], dtype=torch.float32, device=q.device),
        ),
        "alloc new_empty x2": lambda: (
            q.new_empty(q.shape),
            q.new_empty(q.shape[:3], dtype=torch.float32),
        ),
        "alloc empty_like + new_empty": lambda: (
            torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty(q.shape[:3], dtype=torch.float32),
        ),
    }
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        for fn in cases.values():
            for _ in range(300):
                fn()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(7):
            for name, fn in cases.items():
                times[name].append(_us_per_call(fn, args.calls))
    for name, samples in times.items():
        print(f"{name:30s} best {min(samples):6.1f}  median {statistics.median(samples):6.1f} µs")

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        ops.attention(q, k, v, causal=True, layout="bhsd", policy=policy)
    profile.disable()
    torch.cuda.synchronize()
    profile.dump_stats(args.pstats)
    pstats.Stats(args.pstats).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
