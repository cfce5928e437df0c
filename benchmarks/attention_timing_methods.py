"""The forward at 2048 tokens timed three ways, ours beside cuDNN, on one H100/H200.

    python benchmarks/attention_timing_methods.py [--seqlen 2048]

Separates what the host adds from what the kernels do: for head sizes 128 and 64, full and
causal (16k tokens a batch, hidden 2048, bf16), TFLOP/s of
- ``eager``: 16 back-to-back calls between CUDA events (attention_bench's way: host launch
  costs hide behind the kernels except the first call's);
- ``graph``: the same 16 calls captured in a CUDA graph and replayed (no host work at all);
- ``do_bench``: ``triton.testing.do_bench`` (its mean over calls each issued after an L2
  flush, which also hides the call's launch);

for ``ops.attention`` under ``xrt_flash_hopper``, the Gluon forward called directly, SDPA's
cuDNN backend, and cuDNN's ATen entry without and with the log-sum-exp. eager and graph:
medians of 7 samples, the implementations interleaved in a rotating order
(``_interleaved.py``); do_bench runs one implementation after another.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import triton
from _interleaved import graph_replay, interleaved_medians
from torch.nn.attention import SDPBackend, sdpa_kernel

import xpuruntime.ops as ops
from xpuruntime.kernels.attention import hopper
from xpuruntime.policies import KernelPolicy

HOPPER = KernelPolicy(attention="xrt_flash_hopper")
#: cuDNN's SDPA entry in ATen: (q, k, v, bias, compute_lse, dropout, causal, return_debug).
CUDNN = torch.ops.aten._scaled_dot_product_cudnn_attention
CALLS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=2048)
    seq = parser.parse_args().seqlen
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        raise SystemExit("needs an H100/H200 (sm_90)")
    for dim, causal in ((128, False), (128, True), (64, False), (64, True)):
        batch, heads = 16384 // seq, 2048 // dim
        q, k, v = (
            torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
            for _ in range(3)
        )
        flops = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)

        def sdpa_cudnn(q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> Any:
            with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        cases: dict[str, Callable[[], Any]] = {
            "ops.attention": lambda q=q, k=k, v=v, c=causal: ops.attention(
                q, k, v, causal=c, layout="bhsd", policy=HOPPER
            ),
            "gluon forward": lambda q=q, k=k, v=v, c=causal: hopper.hopper_attention_forward(
                q, k, v, causal=c
            ),
            "sdpa cudnn": sdpa_cudnn,
            "aten cudnn": lambda q=q, k=k, v=v, c=causal: CUDNN(
                q, k, v, None, False, 0.0, c, False
            ),
            "aten cudnn+lse": lambda q=q, k=k, v=v, c=causal: CUDNN(
                q, k, v, None, True, 0.0, c, False
            ),
        }
        print(f"hd{dim} S{seq} {'causal' if causal else 'full'}: TFLOP/s eager / graph / do_bench")
        for fn in cases.values():
            fn()
        torch.cuda.synchronize()
        eager = interleaved_medians(cases, 7, CALLS)
        replays = {name: graph_replay(fn, CALLS) for name, fn in cases.items()}
        graph = {n: ms / CALLS for n, ms in interleaved_medians(replays, 7, 1).items()}
        for name, fn in cases.items():
            times = (eager[name], graph[name], triton.testing.do_bench(fn, warmup=25, rep=100))
            print(f"  {name:16s} " + " / ".join(f"{flops / t / 1e9:6.0f}" for t in times))


if __name__ == "__main__":
    main()
