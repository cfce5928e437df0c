"""Which backward runs after an ``xrt_flash_hopper`` forward, and the detail that says why.

Without a GPU: :func:`launch.hopper_backward_plan`'s reasons for passing the Gluon Hopper
backward over, and, in Triton's CPU interpreter (``TRITON_INTERPRET=1``, ``nox -s
attention``), :func:`launch.hopper_backward` running xrt_flash's Triton backward in its place
with the same gradients as :func:`launch.backward`. The Gluon backward itself runs in
test_attention_gpu.py on an sm_90 GPU.
"""

from __future__ import annotations

import os
from typing import Literal

import pytest

pytest.importorskip("torch")  # the core's test session runs without it
pytest.importorskip("triton")  # the launcher imports it
import torch

from xpuruntime.kernels.attention import launch


@pytest.mark.parametrize(
    ("dtype", "head_dim", "expected"),
    [
        (torch.float32, 64, "supports bfloat16 and float16, not torch.float32"),
        (torch.bfloat16, 256, "supports head sizes 64 and 128, not 256"),
        (torch.float16, 32, "supports head sizes 64 and 128, not 32"),
        (torch.bfloat16, 128, "runs on CUDA sm_90 GPUs, not cpu"),
    ],
)
def test_plan_says_why_the_triton_backward_runs(
    dtype: torch.dtype, head_dim: int, expected: str
) -> None:
    q = torch.zeros(1, 3, 2, head_dim, dtype=dtype)  # bhsd: 2 heads
    gluon, plan = launch.hopper_backward_plan(q, layout="bhsd")
    assert not gluon
    assert plan == f"backward: xrt_flash's Triton kernels (the Hopper backward {expected})"


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="run with TRITON_INTERPRET=1 (nox -s attention)",
)
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_hopper_backward_falls_back_to_the_triton_backward(layout: Literal["bshd", "bhsd"]) -> None:
    gen = torch.Generator().manual_seed(0)
    heads_at = 2 if layout == "bshd" else 1

    def tensor(heads: int) -> torch.Tensor:
        shape = [1, 40, 40, 64]
        shape[heads_at] = heads
        return torch.randn(*shape, generator=gen).to(torch.bfloat16)

    q, do = tensor(4), tensor(4)
    k, v = tensor(2), tensor(2)
    out, lse, _ = launch.forward(q, k, v, causal=True, scale=None, layout=layout)
    *grads, detail = launch.hopper_backward(
        do, q, k, v, out, lse, causal=True, scale=None, layout=layout
    )
    assert detail.startswith(
        "backward: xrt_flash's Triton kernels (the Hopper backward runs on CUDA sm_90 GPUs, not "
        "cpu); triton backward dkdv "
    ), detail
    *expected, _ = launch.backward(do, q, k, v, out, lse, causal=True, scale=None, layout=layout)
    for got, want in zip(grads, expected, strict=True):
        assert torch.equal(got, want)
