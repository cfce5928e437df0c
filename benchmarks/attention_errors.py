"""Output errors of the Gluon Hopper forward's defaults against float32, beside cuDNN's.

    python benchmarks/attention_errors.py [--head-dims 64,128] [--seqlens 2048,8192]
        [--masks full,causal] [--variants m64n128s2pp_p,...]

The issue's accuracy target: errors against a float32 reference no worse than cuDNN SDPA's.
For each case (batch 1, 4 heads, bf16 inputs from ``randn``, one generator seeded 1 for the
whole run, so a case's inputs depend on the cases before it) it prints the relative
Frobenius error ‖out − ref‖ / ‖ref‖ and the largest |out − ref| of cuDNN's forward, of the
default variant for that head size, mask and length, of its lazy-rescaling twin (``r``),
and of any ``--variants`` given. The reference is the softmax of the bf16 inputs' scores
in float32.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from _attention_reference import errors, reference

from xpuruntime.kernels.attention import hopper

#: cuDNN's SDPA entry in ATen: (q, k, v, bias, compute_lse, dropout, causal, return_debug).
CUDNN = torch.ops.aten._scaled_dot_product_cudnn_attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlens", default="2048,8192")
    parser.add_argument("--masks", default="full,causal")
    parser.add_argument("--variants", default="", help="comma-separated, besides the default")
    args = parser.parse_args()
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        raise SystemExit("needs an H100/H200 (sm_90)")
    extra = [name for name in args.variants.split(",") if name]
    gen = torch.Generator(device="cuda").manual_seed(1)
    for dim in (int(x) for x in args.head_dims.split(",")):
        for seq in (int(x) for x in args.seqlens.split(",")):
            for causal in (mask == "causal" for mask in args.masks.split(",")):
                q, k, v = (
                    torch.randn(1, 4, seq, dim, device="cuda", generator=gen).bfloat16()
                    for _ in range(3)
                )
                want = reference(q, k, v, causal)
                default = hopper._variant(dim, None, causal, seq)[0]
                names = [default.name, dataclasses.replace(default, lazy=True).name, *extra]
                outs = {"cudnn": CUDNN(q, k, v, None, True, 0.0, causal, False)[0]}
                for name in dict.fromkeys(names):
                    outs[name] = hopper.hopper_attention_forward(
                        q, k, v, causal=causal, variant=name
                    )[0]
                found = {name: errors(out, want) for name, out in outs.items()}
                cells = "  ".join(
                    f"{name} rel {e['rel_fro']:.4e} max {e['max_abs']:.2e}"
                    for name, e in found.items()
                )
                print(f"hd{dim} S{seq} {'causal' if causal else 'full'}: {cells}", flush=True)


if __name__ == "__main__":
    main()
