"""On a CUDA GPU: fused_attention under xrt_flash runs xpuruntime's kernels, compiles with
inductor as one graph, captures in CUDA graphs, and explain() names the kernels; on an sm_90
GPU the same for xrt_flash_hopper (the Gluon Hopper forward and backward; xrt_flash's
backward at head size 256, which the Gluon backward does not take)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import fused_attention

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="interpreter run"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings(
        "ignore:Attempting to run cuBLAS, but there was no current CUDA context:UserWarning"
    ),
]


def _qkv(heads: int = 8, kv_heads: int = 2, seq: int = 1024, dim: int = 128) -> list[Any]:
    shapes = [(2, heads, seq, dim), (2, kv_heads, seq, dim), (2, kv_heads, seq, dim)]
    return [torch.randn(s, device="cuda", dtype=torch.bfloat16, requires_grad=True) for s in shapes]


def test_explain_names_xpuruntime_kernels_forward_and_backward() -> None:
    q, k, v = _qkv()

    def step() -> None:
        fused_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

    with xrt_torch.kernel_policy(attention="xrt_flash"):
        step()  # compile outside the profile
        record = xrt_torch.explain(step)
    libraries = {k.library for k in record.kernels if k.op == "attention"}
    assert "xrt_attention" in libraries, record.kernels
    assert not libraries & {"flash_attention", "efficient_attention", "cudnn_attention"}
    names = {k.name for k in record.kernels if k.library == "xrt_attention"}
    assert {"_xrt_attn_fwd", "_xrt_attn_bwd_dkdv", "_xrt_attn_bwd_dq"} <= names, names
    assert record.fallbacks == []


def test_inductor_compiles_one_graph_and_matches_eager() -> None:
    q, k, v = _qkv(seq=512)

    def step(q: Any, k: Any, v: Any) -> Any:
        return (fused_attention(q, k, v, is_causal=True, enable_gqa=True).float() ** 2).mean()

    with xrt_torch.kernel_policy(attention="xrt_flash"):
        loss = torch.compile(step, fullgraph=True)(q, k, v)
        loss.backward()
        grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        step(q, k, v).backward()
    for got, want in zip(grads, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(got, want)


# make_graphed_callables warms up on a side stream: PyTorch warns about the AccumulateGrad
# nodes of that warm-up, which is expected there.
@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream does not match:UserWarning")
def test_forward_and_backward_capture_in_cuda_graphs() -> None:
    q, k, v = _qkv(seq=512)
    with xrt_torch.kernel_policy(attention="xrt_flash"):
        layer = torch.cuda.make_graphed_callables(
            lambda q, k, v: fused_attention(q, k, v, is_causal=True, enable_gqa=True),
            (q, k, v),
        )
        out = layer(q, k, v)
        out.sum().backward()
    ref = F.scaled_dot_product_attention(
        *(t.detach().float() for t in (q, k, v)), is_causal=True, enable_gqa=True
    )
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=0)
    assert q.grad is not None
    assert torch.isfinite(q.grad).all()


# --- xrt_flash_hopper: the Gluon Hopper forward and backward ------------------------------

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(
    not SM90,
    reason="xrt_flash_hopper runs on sm_90 GPUs (H100/H200) only"
    + (f"; this GPU is {torch.cuda.get_device_capability()}" if torch.cuda.is_available() else ""),
)


@needs_sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim"),
    [
        pytest.param(8, 8, 128, id="mha-128"),
        pytest.param(8, 2, 128, id="gqa-128"),
        pytest.param(16, 4, 64, id="gqa-64"),
        pytest.param(8, 1, 64, id="mqa-64"),
    ],
)
def test_hopper_forward_and_backward_match_sdpa(
    heads: int, kv_heads: int, dim: int, causal: bool
) -> None:
    q, k, v = _qkv(heads=heads, kv_heads=kv_heads, seq=1000, dim=dim)
    with xrt_torch.kernel_policy(attention="xrt_flash_hopper") as record:
        out = fused_attention(q, k, v, is_causal=causal, enable_gqa=True)
        grad = torch.randn_like(out)
        out.backward(grad)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    ref.backward(grad.float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)
    for got, want in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got.float(), want.grad, atol=5e-2, rtol=0)
    (decision,) = [d for d in record.decisions if d.op == "attention"]
    assert (decision.kernel, decision.mode) == ("xrt_flash_hopper", "pin")
    assert "gluon hopper forward" in decision.reason
    # What its backward runs on these inputs (the record is written at the forward): the
    # fused or the deterministic Gluon path, as the core's plan says for this head size.
    from xpuruntime.kernels.attention.launch import hopper_backward_plan

    gluon, plan = hopper_backward_plan(q, causal=causal, layout="bhsd")
    assert gluon
    assert plan.startswith("backward: gluon hopper backward (")
    assert plan in decision.reason
    assert record.fallbacks == []


@needs_sm90
def test_hopper_at_head_size_256_runs_the_triton_backward_and_says_why() -> None:
    q, k, v = _qkv(heads=4, kv_heads=2, seq=700, dim=256)
    with xrt_torch.kernel_policy(attention="xrt_flash_hopper") as record:
        out = fused_attention(q, k, v, is_causal=True, enable_gqa=True)
        grad = torch.randn_like(out)
        out.backward(grad)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
    ref.backward(grad.float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)
    for got, want in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got.float(), want.grad, atol=5e-2, rtol=0)
    (decision,) = [d for d in record.decisions if d.op == "attention"]
    assert decision.kernel == "xrt_flash_hopper"
    assert "gluon hopper forward" in decision.reason
    assert (
        "backward: xrt_flash's Triton kernels (the Hopper backward supports head sizes 64 and "
        "128, not 256)" in decision.reason
    )
    assert record.fallbacks == []


@needs_sm90
def test_pinned_xrt_flash_keeps_the_triton_forward_on_hopper() -> None:
    q, k, v = _qkv(seq=512)
    with xrt_torch.kernel_policy(attention="xrt_flash") as record:
        fused_attention(q, k, v, is_causal=True, enable_gqa=True)
    (decision,) = [d for d in record.decisions if d.op == "attention"]
    assert decision.kernel == "xrt_flash"
    assert "triton forward" in decision.reason
    assert "gluon" not in decision.reason


@needs_sm90
@pytest.mark.parametrize("dim", [64, 128])
def test_explain_names_the_hopper_forward_and_backward_kernels(dim: int) -> None:
    q, k, v = _qkv(dim=dim)

    def step() -> None:
        fused_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

    with xrt_torch.kernel_policy(attention="xrt_flash_hopper"):
        step()  # compile outside the profile
        record = xrt_torch.explain(step)
    by_library: dict[str | None, set[str]] = {}
    for kernel in record.kernels:
        if kernel.op == "attention":
            by_library.setdefault(kernel.library, set()).add(kernel.name)
    # The fused backward is the default at both head sizes.
    assert by_library.get("xrt_attention_hopper") == {
        "_xrt_attn_fwd_hopper",
        "_xrt_attn_bwd_prep_hopper",
        "_xrt_attn_bwd_fused_hopper",
        "_xrt_attn_bwd_dq_convert_hopper",
    }, by_library
    assert "xrt_attention" not in by_library  # no Triton kernel ran
    assert not set(by_library) & {"flash_attention", "efficient_attention", "cudnn_attention"}
    assert record.fallbacks == []


@needs_sm90
def test_hopper_compiles_with_inductor_and_matches_eager() -> None:
    q, k, v = _qkv(seq=512)

    def step(q: Any, k: Any, v: Any) -> Any:
        return (fused_attention(q, k, v, is_causal=True, enable_gqa=True).float() ** 2).mean()

    with xrt_torch.kernel_policy(attention="xrt_flash_hopper"):
        loss = torch.compile(step, fullgraph=True)(q, k, v)
        loss.backward()
        grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        step(q, k, v).backward()
    for got, want in zip(grads, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(got, want)


@needs_sm90
@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream does not match:UserWarning")
def test_hopper_forward_and_backward_capture_in_cuda_graphs() -> None:
    q, k, v = _qkv(seq=512)
    with xrt_torch.kernel_policy(attention="xrt_flash_hopper"):
        layer = torch.cuda.make_graphed_callables(
            lambda q, k, v: fused_attention(q, k, v, is_causal=True, enable_gqa=True),
            (q, k, v),
        )
        out = layer(q, k, v)
        out.sum().backward()
    ref = F.scaled_dot_product_attention(
        *(t.detach().float() for t in (q, k, v)), is_causal=True, enable_gqa=True
    )
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=0)
    assert q.grad is not None
    assert torch.isfinite(q.grad).all()
