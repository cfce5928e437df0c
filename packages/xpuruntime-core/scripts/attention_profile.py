"""One xrt_flash forward, one xrt_flash_hopper forward (sm_90) and one cuDNN SDPA forward for
Nsight Compute (attention_profile.sh).

bf16, batch 4, 16 heads, seqlen 4096, head size 128, full attention: one of the forward
cases of benchmarks/attention_bench.py. Both run once before the profiled range (Triton
compiles, cuDNN builds its plan), then once each between cudaProfilerStart/Stop, so
``ncu --profile-from-start off`` sees exactly the two attention kernels (and cuDNN's helpers).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from xpuruntime.kernels.attention import launch


def main() -> None:
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def ours() -> torch.Tensor:
        return launch.forward(q, k, v, causal=False, scale=None, layout="bhsd")[0]

    def hopper() -> torch.Tensor:
        from xpuruntime.kernels.attention.hopper import hopper_attention_forward

        return hopper_attention_forward(q, k, v, causal=False)[0]

    def cudnn() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    kernels = [ours, cudnn] + ([hopper] if torch.cuda.get_device_capability() == (9, 0) else [])
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
