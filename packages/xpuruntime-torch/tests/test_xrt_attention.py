"""fused_attention under a policy naming xrt_flash, in Triton's CPU interpreter.

The custom ops run the core's real Triton kernels (interpreted) on CPU tensors: autograd
through the backward kernels, fake implementations, opcheck, torch.compile(fullgraph=True),
pin / prefer behaviour and the record. GPU versions of these live in test_xrt_attention_gpu.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s attention)", allow_module_level=True)
pytest.importorskip("triton")

import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, OpPolicy
from xpuruntime.pytorch.ops import fused_attention
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import FallbackWarning

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


def _inputs(
    heads: int = 4, kv_heads: int = 2, seq: int = 40, dim: int = 64, dtype: Any = torch.float16
) -> list[Any]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, heads, seq, dim), (2, kv_heads, seq, dim), (2, kv_heads, seq, dim)]
    return [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes]


def _reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    return out, leaves


@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients_match_float32(causal: bool) -> None:
    q, k, v = _inputs()
    with xrt_torch.kernel_policy(attention="xrt_flash") as record:
        out = fused_attention(q, k, v, is_causal=causal, enable_gqa=True)
        grad = torch.randn_like(out)
        out.backward(grad)
    ref, leaves = _reference(q, k, v, causal)
    ref.backward(grad.float())
    torch.testing.assert_close(out.float(), ref, atol=4e-3, rtol=0)
    for got, want in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got.float(), want.grad, atol=8e-3, rtol=0)
    (decision,) = record.decisions[-1:]
    assert (decision.kernel, decision.mode) == ("xrt_flash", "pin")
    assert "triton forward" in decision.reason
    assert record.fallbacks == []


def test_opcheck_forward_and_backward_ops() -> None:
    q, k, v = _inputs(seq=24)
    args = (q, k, v, True, None, "pin")
    results = torch.library.opcheck(torch.ops.xpuruntime.xrt_flash_attention.default, args)
    assert set(results.values()) == {"SUCCESS"}, results
    out, lse = torch.ops.xpuruntime.xrt_flash_attention(
        *(t.detach() for t in (q, k, v)), True, None, "pin"
    )
    backward_args = (
        torch.randn_like(out),
        q.detach(),
        k.detach(),
        v.detach(),
        out,
        lse,
        True,
        None,
        "pin",
    )
    results = torch.library.opcheck(
        torch.ops.xpuruntime.xrt_flash_attention_backward.default, backward_args,
        test_utils=("test_schema", "test_faketensor"),
    )  # fmt: skip
    assert set(results.values()) == {"SUCCESS"}, results


def test_compiles_as_one_graph() -> None:
    q, k, v = _inputs(seq=24)

    def step(q: Any, k: Any, v: Any) -> Any:
        return fused_attention(q, k, v, is_causal=True, enable_gqa=True).float().sum()

    with xrt_torch.kernel_policy(attention="xrt_flash"):
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        loss = compiled(q, k, v)
        loss.backward()
        eager = step(*(t.detach().requires_grad_() for t in (q, k, v)))
    torch.testing.assert_close(loss, eager)
    assert q.grad is not None
    assert k.grad is not None


def test_pinned_kernel_that_cannot_serve_raises_under_error() -> None:
    strict = ExecutionPolicy(fallback="error")
    q, k, v = _inputs(dtype=torch.float32)
    with (
        xrt_torch.kernel_policy(attention="xrt_flash", exec_policy=strict),
        pytest.raises(UnsupportedOperationError, match=r"pins attention='xrt_flash'.*float32"),
    ):
        fused_attention(q, k, v, enable_gqa=True)
    q, k, v = _inputs()
    mask = torch.ones(40, 40, dtype=torch.bool)
    with (
        xrt_torch.kernel_policy(attention="xrt_flash", exec_policy=strict),
        pytest.raises(UnsupportedOperationError, match="takes no attn_mask"),
    ):
        fused_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def test_pinned_kernel_that_cannot_serve_warns_and_records_under_warn() -> None:
    q, k, v = _inputs(dtype=torch.float32)
    with (
        xrt_torch.kernel_policy(attention="xrt_flash") as record,
        pytest.warns(FallbackWarning, match="float32"),
    ):
        out = fused_attention(q, k, v, enable_gqa=True)
    ref, _ = _reference(q, k, v, False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert [(f.requested, f.chosen, f.mode) for f in record.fallbacks] == [
        ("xrt_flash", "torch", "warn")
    ]


def test_preferred_kernel_falls_back_to_sdpa_through_the_fallback_mode() -> None:
    q, k, v = _inputs(dtype=torch.float32)
    prefer = {"attention": OpPolicy(kernel="xrt_flash", mode="prefer")}
    with xrt_torch.kernel_policy(**prefer, exec_policy=ExecutionPolicy(fallback="allow")) as record:
        out = fused_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.sum().backward()
    ref, _ = _reference(q, k, v, True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert [(f.requested, f.chosen) for f in record.fallbacks] == [("xrt_flash", "torch")]
    assert "float32" in record.fallbacks[0].reason
    # A preferred kernel accepts a fallback by definition: under 'error' it is warned, as in
    # inference (the one kernel fallback rule).
    with (
        xrt_torch.kernel_policy(**prefer, exec_policy=ExecutionPolicy(fallback="error")),
        pytest.warns(FallbackWarning, match="xrt_flash"),
    ):
        fused_attention(q, k, v, enable_gqa=True)


def test_plan_names_the_kernel() -> None:
    with xrt_torch.kernel_policy(attention="xrt_flash") as record:
        (setting,) = [s for s in record.settings if s.name == "attention"]
    assert setting.honoured
    assert "xpuruntime's Triton kernels" in setting.note
