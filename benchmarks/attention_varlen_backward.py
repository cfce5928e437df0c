"""The attention backward on packed variable-length sequences, on an sm_90 GPU: the Gluon Hopper
backward (its deterministic kernels on 2-D grids) against xrt_flash's Triton varlen backward,
which ran after the Hopper varlen forward before it, and PyTorch's ``varlen_attn`` backward
(autograd through it, its key and value heads repeated to the query's: it takes no GQA)
where this PyTorch has it.

    python benchmarks/attention_varlen_backward.py [--rounds 5] [--out DIR]

Each case packs about 16k tokens into uneven sequences (seeded lengths around a mean, one
empty), 2048 / head size query heads, GQA 4:1, bfloat16; the forward's output and
log-sum-exp come from the Hopper forward. The gradients are compared with xrt_flash's (max
|difference| over the sequences' rows); times are medians of interleaved samples
(``_interleaved``), TFLOP/s count 2.5 x 4 x heads x head_dim x visible (query, key) pairs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch
from _interleaved import interleaved_medians

from xpuruntime.kernels.attention import hopper, hopper_bwd, launch


def lengths(total: int, mean: int, seed: int) -> list[int]:
    """Uneven lengths (0.25 to 1.75 times ``mean``) adding up to ``total``, one of them 0."""
    rng = random.Random(seed)
    out = [0]
    while sum(out) < total:
        out.append(min(rng.randint(mean // 4, 7 * mean // 4), total - sum(out)))
    return out


def visible_pairs(lens: list[int], causal: bool) -> int:
    return sum(n * (n + 1) // 2 if causal else n * n for n in lens)


def case(head_dim: int, mean: int, causal: bool, rounds: int) -> dict[str, Any]:
    lens = lengths(16384, mean, seed=mean + head_dim)
    heads = 2048 // head_dim
    kv_heads = heads // 4
    total = sum(lens)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def draw(h: int) -> torch.Tensor:
        return torch.randn(total, h, head_dim, device="cuda", generator=gen).bfloat16()

    q, k, v, do = draw(heads), draw(kv_heads), draw(kv_heads), draw(heads)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda").int()
    longest = max(lens)
    packed = {"cu_seqlens_q": cu, "cu_seqlens_k": cu, "max_seqlen_q": longest}
    packed["max_seqlen_k"] = longest
    out, lse = hopper.hopper_attention_forward(q, k, v, causal=causal, **packed)
    varlen = launch.Varlen(cu, cu, longest, longest)

    def gluon() -> Any:
        return hopper_bwd.hopper_attention_backward(do, q, k, v, out, lse, causal=causal, **packed)

    def triton() -> Any:
        return launch.backward(do, q, k, v, out, lse, causal=causal, scale=None, layout="thd",
                               varlen=varlen)[:3]  # fmt: skip

    fns = {"gluon packed": gluon, "xrt_flash varlen": triton}
    try:
        from torch.nn.attention.varlen import varlen_attn

        # Its key and value heads repeated to the query's (it takes no GQA).
        leaves = [x.detach().requires_grad_() for x in (q, k.repeat_interleave(4, 1),
                                                         v.repeat_interleave(4, 1))]  # fmt: skip
        try:
            window = (-1, 0) if causal else (-1, -1)
            torch_out = varlen_attn(*leaves, cu, cu, longest, longest, window_size=window)
        except TypeError:  # a PyTorch whose varlen_attn takes is_causal
            torch_out = varlen_attn(*leaves, cu, cu, longest, longest, is_causal=causal)

        def torch_varlen() -> Any:
            return torch.autograd.grad(torch_out, leaves, do, retain_graph=True)

        torch_varlen()
        fns["torch varlen_attn"] = torch_varlen
    except Exception as error:  # older PyTorch, or arguments it refuses
        print(f"  torch varlen_attn backward unavailable: {type(error).__name__}: {error}"[:200])
    diffs = {
        name: (a.float() - b.float()).abs().max().item()
        for name, a, b in zip(("dq", "dk", "dv"), gluon(), triton(), strict=True)
    }
    medians = interleaved_medians(fns, rounds=rounds, calls=5)
    flops = 2.5 * 4 * heads * head_dim * visible_pairs(lens, causal)
    row: dict[str, Any] = {
        "head_dim": head_dim, "mean": mean, "causal": causal, "sequences": len(lens),
        "heads": heads, "kv_heads": kv_heads, "max|gluon - xrt_flash|": diffs,
        "ms": medians, "tflops": {n: flops / (ms * 1e-3) / 1e12 for n, ms in medians.items()},
    }  # fmt: skip
    ours = medians["gluon packed"]
    ratios = "  ".join(
        f"vs {n} {ms / ours:.2f}x" for n, ms in medians.items() if n != "gluon packed"
    )
    print(
        f"hd{head_dim} mean {mean} {'causal' if causal else 'full'} ({len(lens)} sequences): "
        f"gluon {ours:.3f} ms {row['tflops']['gluon packed']:.0f} TFLOP/s  {ratios}  "
        f"max|diff| dq {diffs['dq']:.1e} dk {diffs['dk']:.1e} dv {diffs['dv']:.1e}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="directory for attention_varlen_backward.json")
    args = parser.parse_args()
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("the Gluon Hopper backward runs on sm_90 GPUs (H100/H200) only")
        return 1
    rows = [
        case(head_dim, mean, causal, args.rounds)
        for head_dim in (64, 128)
        for mean in (512, 2048)
        for causal in (False, True)
    ]
    if args.out:
        path = Path(args.out) / "attention_varlen_backward.json"
        path.write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1)
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
