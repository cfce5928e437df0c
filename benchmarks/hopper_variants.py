"""The Gluon Hopper forward's variants side by side with cuDNN, kernels alone, on one H100/H200.

    python benchmarks/hopper_variants.py [--head-dims 64,128] [--seqlens 512,1024,2048,4096]
        [--masks full,causal] [--variants m64n128s2pp,m64n128s2pp_l,...] [--rounds 7]
        [--triton]

For each case (16k tokens a batch, hidden 2048, bf16) every variant (default: the head
size's candidates, ``hopper.variant_names``) and cuDNN's ATen entry with the log-sum-exp
(what ours writes too) run as CUDA-graph replays of 16 calls, so the host adds nothing and
the figures compare kernels (``--triton`` adds xrt_flash's Triton forward, its tile
candidates timed on the first call, before the replays are captured); the replays are
interleaved in a rotating order (``_interleaved.py``). Prints TFLOP/s (4 * B * H * S^2 * D, halved when causal), the ratio
against cuDNN, and each variant's largest difference from cuDNN's output (a variant that
computes something else shows there, not only in the tests). For the choice of defaults;
the product path's figures are ``attention_bench.py``'s.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from _interleaved import graph_replay, interleaved_medians

from xpuruntime.kernels.attention import hopper, launch

#: cuDNN's SDPA entry in ATen: (q, k, v, bias, compute_lse, dropout, causal, return_debug).
CUDNN = torch.ops.aten._scaled_dot_product_cudnn_attention
CALLS = 16


def _case(dim: int, seq: int, causal: bool, variants: list[str], rounds: int, triton: bool) -> None:
    batch, heads = max(1, 16384 // seq), 2048 // dim
    q, k, v = (
        torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3)
    )
    flops = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
    want = CUDNN(q, k, v, None, True, 0.0, causal, False)[0]
    cases: dict[str, Callable[[], Any]] = {
        "cudnn": lambda: CUDNN(q, k, v, None, True, 0.0, causal, False)
    }
    errors: dict[str, float] = {}
    for name in variants:
        cases[name] = lambda name=name: hopper.hopper_attention_forward(
            q, k, v, causal=causal, variant=name
        )
        got, _lse = cases[name]()
        errors[name] = float((got.float() - want.float()).abs().max())
    if triton:  # the portable kernel: its first call (tuning on) times its tile candidates
        cases["xrt_flash (Triton)"] = lambda: launch.forward(
            q, k, v, causal=causal, scale=None, layout="bhsd"
        )
        got = cases["xrt_flash (Triton)"]()[0]
        errors["xrt_flash (Triton)"] = float((got.float() - want.float()).abs().max())
    replays = {name: graph_replay(fn, CALLS) for name, fn in cases.items()}
    ms = {name: t / CALLS for name, t in interleaved_medians(replays, rounds, 1).items()}
    print(f"hd{dim} S{seq} {'causal' if causal else 'full'} (batch {batch}, heads {heads})")
    for name, t in ms.items():
        ratio = ms["cudnn"] / t
        error = f"  max |ours - cudnn| {errors[name]:.1e}" if name in errors else ""
        print(f"  {name:18s} {flops / t / 1e9:6.0f} TFLOP/s  {ratio:5.2f}x cuDNN{error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlens", default="512,1024,2048,4096")
    parser.add_argument("--masks", default="full,causal")
    parser.add_argument("--variants", default="", help="comma-separated; default: all")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--triton", action="store_true", help="also xrt_flash's Triton forward")
    args = parser.parse_args()
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        raise SystemExit("needs an H100/H200 (sm_90)")
    launch.set_tuning(args.triton)  # the Triton forward at its best tiles, not its first
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for dim in (int(x) for x in args.head_dims.split(",")):
        variants = args.variants.split(",") if args.variants else list(hopper.variant_names(dim))
        for mask in args.masks.split(","):
            for seq in (int(x) for x in args.seqlens.split(",")):
                _case(dim, seq, mask == "causal", variants, args.rounds, args.triton)


if __name__ == "__main__":
    main()
