"""Attention kernels for Nsight Compute (attention_profile.sh): each runs once before the
profiled range (Triton compiles, cuDNN builds its plan), then once between
cudaProfilerStart/Stop, so ``ncu --profile-from-start off`` sees exactly those launches.

    python3 attention_profile.py                       # forwards, full attention
    python3 attention_profile.py --backward [--causal] [--variants m64s2n64s2_l,...]

bf16, batch 4, 16 heads, seqlen 4096, head size 128: one of the cases of
benchmarks/attention_bench.py. Forward: one xrt_flash forward, one xrt_flash_hopper forward
(sm_90) and one cuDNN SDPA forward. Backward (sm_90): the Gluon Hopper backward of each
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

SHAPE = (4, 16, 4096, 128)


def _forwards() -> list[Any]:
    q, k, v = (torch.randn(*SHAPE, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def ours() -> torch.Tensor:
        return launch.forward(q, k, v, causal=False, scale=None, layout="bhsd")[0]

    def hopper() -> torch.Tensor:
        from xpuruntime.kernels.attention.hopper import hopper_attention_forward

        return hopper_attention_forward(q, k, v, causal=False)[0]

    def cudnn() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    return [ours, cudnn] + ([hopper] if torch.cuda.get_device_capability() == (9, 0) else [])


def _backwards(causal: bool, variants: list[str]) -> list[Any]:
    from xpuruntime.kernels.attention import hopper_bwd
    from xpuruntime.kernels.attention.hopper import hopper_attention_forward

    q, k, v, do = (torch.randn(*SHAPE, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = SHAPE[3] ** -0.5
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
    parser.add_argument("--causal", action="store_true", help="backward: causal masking")
    parser.add_argument("--variants", default="", help="backward: comma-separated variants")
    args = parser.parse_args()
    variants = [n for n in args.variants.split(",") if n]
    kernels = _backwards(args.causal, variants) if args.backward else _forwards()
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
