"""On a CUDA GPU: the op xpuruntime::fused_attention on PyTorch's CUDA backends through the
C++ kernels and autograd node (torch.compile's path): each backend's own forward and
backward with SDPA's input preparation (flash's head-size padding, boolean masks made
additive, the memory-efficient kernel's mask alignment), opcheck, and the eager fast path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

_SDPA_BACKENDS = {"flash_v2": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                  "cudnn": "CUDNN_ATTENTION"}  # fmt: skip


def _inputs(head_dim: int, seq: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    return q, k, v


def _expected(kernel: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None, causal: bool) -> torch.Tensor:  # fmt: skip
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with sdpa_kernel([getattr(SDPBackend, _SDPA_BACKENDS[kernel])]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    except RuntimeError as error:
        pytest.skip(f"{kernel} cannot serve this case through SDPA either: {error}")


@pytest.mark.parametrize("kernel", sorted(_SDPA_BACKENDS))
@pytest.mark.parametrize(
    ("head_dim", "seq", "masked", "causal"), [(72, 256, False, True), (64, 200, True, False)]
)
def test_op_runs_the_backend_and_its_backward_in_cpp(
    kernel: str, head_dim: int, seq: int, masked: bool, causal: bool
) -> None:
    q, k, v = _inputs(head_dim, seq)
    mask = torch.rand(seq, seq, device="cuda") > 0.3 if masked else None
    expected = _expected(kernel, q, k, v, mask, causal)
    grad = torch.randn_like(expected)
    with xrt_torch.kernel_policy(attention=kernel) as record:
        out, lse, _, _ = torch.ops.xpuruntime.fused_attention(
            q, k, v, mask, 0.0, causal, None, kernel, "pin", True
        )
    assert type(out.grad_fn).__name__ == "CppFunction"
    assert lse.numel() > 0
    assert record.fallbacks == []
    assert {d.kernel for d in record.decisions if d.op == "attention"} == {kernel}
    torch.testing.assert_close(out, expected, atol=2e-3, rtol=2e-3)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(expected, (q, k, v), grad)
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kernel", sorted(_SDPA_BACKENDS))
def test_op_passes_opcheck_on_cuda(kernel: str) -> None:
    q, k, v = _inputs(64, 128)
    _expected(kernel, q, k, v, None, True)  # skips where the backend cannot serve it
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_attention.default,
        (q, k, v, None, 0.0, True, None, kernel, "pin", True),
        # Static shapes: the eligibility check (torch.backends.cuda.can_use_*) reads sizes.
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                    "test_aot_dispatch_static"),
    )  # fmt: skip


def test_eager_fast_path_decides_once_and_runs_pytorchs_autograd() -> None:
    q, k, v = _inputs(64, 256)
    with xrt_torch.kernel_policy(attention="flash_v2") as record:
        outputs = [xrt_torch.ops.fused_attention(q, k, v, is_causal=True) for _ in range(3)]
    assert [d.kernel for d in record.decisions if d.op == "attention"] == ["flash_v2"]
    # The entry point's own autograd node, as under SDPA.
    assert "FlashAttention" in type(outputs[-1].grad_fn).__name__
    expected = _expected("flash_v2", q, k, v, None, True)
    for out in outputs:
        torch.testing.assert_close(out, expected, atol=2e-3, rtol=2e-3)
