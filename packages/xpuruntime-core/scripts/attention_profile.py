"""Attention kernels for Nsight Compute (attention_profile.sh): each runs once before the
profiled range (Triton compiles, cuDNN builds its plan), then once between
cudaProfilerStart/Stop, so ``ncu --profile-from-start off`` sees exactly those launches.

    python3 attention_profile.py                       # forwards, full attention
    python3 attention_profile.py --causal --head-dim 64 --seqlen 2048   # forwards, causal
    python3 attention_profile.py --backward [--causal] [--variants m64s2n64s2_l,...]

bf16, 16k tokens a batch (batch 4 at the default seqlen 4096), 2048 / head size heads (16 at
the default head size 128): the cases of benchmarks/attention_bench.py. Forward: one
xrt_flash forward, one xrt_flash_hopper forward (sm_90; its default variant of the shape,
or ``XPURUNTIME_HOPPER_ATTENTION_VARIANT``'s) and one cuDNN SDPA forward. Backward (sm_90): the Gluon Hopper backward of each
variant named (default: the default of the mask) on the Hopper forward's output and
log-sum-exp, and cuDNN's backward through autograd on cuDNN's own forward (its kernels:
the dO·O dot, the fused dK/dV/dQ kernel and the dQ conversion).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from xpuruntime.kernels.attention import launch

_TOKENS = 16384
_HIDDEN = 2048


def _shape(seqlen: int, head_dim: int) -> tuple[int, int, int, int]:
    """(batch, heads, seqlen, head size) of attention_bench.py's grid: 16k tokens, hidden 2048."""
    return (max(1, _TOKENS // seqlen), _HIDDEN // head_dim, seqlen, head_dim)


def _forwards(causal: bool, shape: tuple[int, int, int, int]) -> list[Any]:
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def ours() -> torch.Tensor:
        return launch.forward(q, k, v, causal=causal, scale=None, layout="bhsd")[0]

    def hopper() -> torch.Tensor:
        from xpuruntime.kernels.attention.hopper import hopper_attention_forward

        return hopper_attention_forward(q, k, v, causal=causal)[0]

    def cudnn() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return [ours, cudnn] + ([hopper] if torch.cuda.get_device_capability() == (9, 0) else [])


def _backwards(causal: bool, variants: list[str], shape: tuple[int, int, int, int]) -> list[Any]:
    from xpuruntime.kernels.attention import hopper_bwd
    from xpuruntime.kernels.attention.hopper import hopper_attention_forward

    q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = shape[3] ** -0.5
    out, lse = hopper_attention_forward(q, k, v, causal=causal)[:2]
    # cuDNN's backward through autograd on its own forward (kept for the repeated call):
    # torch.autograd.grad returns fresh gradients, so no accumulation kernel joins it.
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        c_out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)

    def cudnn() -> Any:
        return torch.autograd.grad(c_out, leaves, do, retain_graph=True)

    def ours(name: str | None) -> Any:
        return lambda: hopper_bwd.hopper_attention_backward(
            do, q, k, v, out, lse, causal=causal, scale=scale, variant=name
        )

    return [ours(name) for name in variants or [None]] + [cudnn]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--causal", action="store_true", help="causal masking")
    parser.add_argument("--variants", default="", help="backward: comma-separated variants")
    parser.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    parser.add_argument("--seqlen", type=int, default=4096)
    args = parser.parse_args()
    variants = [n for n in args.variants.split(",") if n]
    shape = _shape(args.seqlen, args.head_dim)
    kernels = (
        _backwards(args.causal, variants, shape) if args.backward else _forwards(args.causal, shape)
    )
    for fn in kernels:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for fn in kernels:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
