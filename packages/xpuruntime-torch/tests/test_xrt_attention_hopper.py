"""fused_attention under a policy naming xrt_flash_hopper, on the CPU.

The Hopper forward runs only on sm_90 GPUs (test_xrt_attention_gpu.py runs it there); here
every call goes through the kernel fallback rule, for real: the policy layer refuses it on a
CPU-only training, and with the policy's device set to CUDA the custom op itself asks the
core's dispatcher, which says why not (CPU tensors), so the op's kernel argument, its fake,
opcheck, torch.compile and the fallback's backward run as on a GPU that cannot serve a call.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.kernels.attention import HOPPER_KERNEL
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, OpPolicy, vocabulary
from xpuruntime.pytorch.kernels import kernel_library
from xpuruntime.pytorch.mapping import kernel_devices, plan, supported_kernels
from xpuruntime.pytorch.ops import fused_attention
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import FallbackWarning

# The policy's device: the op, not the policy layer, decides on these CPU tensors.
ON_CUDA = ExecutionPolicy(device="cuda", fallback="allow")
REASON = "runs on NVIDIA Hopper GPUs only (compute capability 9.0: H100, H200), not on the CPU"


def _inputs(dtype: Any = torch.bfloat16) -> list[Any]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 4, 24, 64), (2, 2, 24, 64), (2, 2, 24, 64)]
    return [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes]


def _reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    return F.scaled_dot_product_attention(
        *(t.detach() for t in (q, k, v)), is_causal=causal, enable_gqa=True
    )


def test_mapping_runs_it_on_cuda_only() -> None:
    assert kernel_devices("attention", HOPPER_KERNEL) == frozenset({"cuda"})
    rows = {(r.op, r.kernel): r.devices for r in supported_kernels()}
    assert rows[("attention", HOPPER_KERNEL)] == frozenset({"cuda"})
    # The built-in declaration the policy pre-check reads agrees with this table.
    declared = {(r.op, r.kernel): r.devices for r in vocabulary.declared_kernels("torch")}
    assert declared[("attention", HOPPER_KERNEL)] == frozenset({"cuda"})
    policy = KernelPolicy(attention=HOPPER_KERNEL)
    (setting,) = plan(policy, None, frozenset({"cuda"})).settings
    assert "Hopper forward and backward (Gluon" in setting.note
    (refused,) = plan(policy, None, frozenset({"cpu"})).unapplicable
    assert "'xrt_flash_hopper' runs on cuda" in refused.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="the training runs on the CPU only here")
def test_pin_on_a_cpu_training_follows_the_fallback_rule() -> None:
    q, k, v = _inputs()
    with (
        pytest.raises(UnsupportedOperationError, match="pins attention='xrt_flash_hopper'"),
        xrt_torch.kernel_policy(
            attention=HOPPER_KERNEL, exec_policy=ExecutionPolicy(fallback="error")
        ),
    ):
        fused_attention(q, k, v, enable_gqa=True)
    with (
        pytest.warns(FallbackWarning, match="xrt_flash_hopper"),
        xrt_torch.kernel_policy(attention=HOPPER_KERNEL) as record,
    ):
        out = fused_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, _reference(q, k, v, False))
    assert [(f.requested, f.mode) for f in record.fallbacks] == [(HOPPER_KERNEL, "warn")]


def test_op_refusal_under_error_raises_with_the_reason() -> None:
    q, k, v = _inputs()
    strict = ExecutionPolicy(device="cuda", fallback="error")
    with (
        xrt_torch.kernel_policy(attention=HOPPER_KERNEL, exec_policy=strict),
        pytest.raises(UnsupportedOperationError, match=rf"'xrt_flash_hopper'.*{re.escape(REASON)}"),
    ):
        fused_attention(q, k, v, enable_gqa=True)
    # A mask is refused before the kernel is asked, naming the kernel.
    mask = torch.ones(24, 24, dtype=torch.bool)
    with (
        xrt_torch.kernel_policy(attention=HOPPER_KERNEL, exec_policy=strict),
        pytest.raises(UnsupportedOperationError, match="xrt_flash_hopper takes no attn_mask"),
    ):
        fused_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("causal", [False, True])
def test_op_refusal_falls_back_to_sdpa_and_records_it(causal: bool) -> None:
    q, k, v = _inputs()
    with xrt_torch.kernel_policy(attention=HOPPER_KERNEL, exec_policy=ON_CUDA) as record:
        out = fused_attention(q, k, v, is_causal=causal, enable_gqa=True)
        out.float().sum().backward()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    ref.float().sum().backward()
    torch.testing.assert_close(out, ref.detach())
    # The fallback's backward recomputes SDPA with the key/value heads repeated, so the bf16
    # gradients of shared heads sum in another order than enable_gqa's (a bf16 ulp apart).
    for got, want in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got, want.grad, atol=1e-2, rtol=1.6e-2)
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen, fallback.mode) == (HOPPER_KERNEL, "torch", "allow")
    assert REASON in fallback.reason
    (decision,) = [d for d in record.decisions if d.op == "attention"]
    assert decision.kernel == "torch"
    assert decision.reason.startswith(f"fallback from {HOPPER_KERNEL}: ")


def test_preferred_kernel_falls_back_through_the_fallback_mode() -> None:
    q, k, v = _inputs()
    prefer = {"attention": OpPolicy(kernel=HOPPER_KERNEL, mode="prefer")}
    strict = ExecutionPolicy(device="cuda", fallback="error")
    # A preferred kernel accepts a fallback: under 'error' it is warned, as in inference.
    with (
        xrt_torch.kernel_policy(**prefer, exec_policy=strict) as record,
        pytest.warns(FallbackWarning, match="xrt_flash_hopper"),
    ):
        out = fused_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, _reference(q, k, v, False))
    assert [(f.requested, f.mode) for f in record.fallbacks] == [(HOPPER_KERNEL, "warn")]


def test_opcheck_with_the_kernel_argument() -> None:
    q, k, v = _inputs()
    args = (q, k, v, True, None, "prefer", HOPPER_KERNEL)
    # The fallback's log-sum-exp is NaN by design, which the AOT-dispatch checks compare as
    # unequal (NaN != NaN); test_compiles_as_one_graph runs that path.
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    with xrt_torch.kernel_policy(attention=HOPPER_KERNEL, exec_policy=ON_CUDA):
        results = torch.library.opcheck(
            torch.ops.xpuruntime.xrt_flash_attention.default, args, test_utils=checks
        )
        out, lse = torch.ops.xpuruntime.xrt_flash_attention(
            *(t.detach() for t in (q, k, v)), True, None, "prefer", HOPPER_KERNEL
        )
        grads = torch.ops.xpuruntime.xrt_flash_attention_backward(
            torch.ones_like(out), *(t.detach() for t in (q, k, v)), out, lse, True, None,
            "prefer", HOPPER_KERNEL,
        )  # fmt: skip
    assert set(results.values()) == {"SUCCESS"}, results
    assert torch.isnan(lse).all()  # the fallback keeps no log-sum-exp: its backward recomputes
    assert [tuple(g.shape) for g in grads] == [tuple(t.shape) for t in (q, k, v)]
    schema = str(torch.ops.xpuruntime.xrt_flash_attention.default._schema)
    assert 'str requested="xrt_flash"' in schema  # calls without it run xrt_flash, as before


def test_compiles_as_one_graph() -> None:
    q, k, v = _inputs()

    def step(q: Any, k: Any, v: Any) -> Any:
        return fused_attention(q, k, v, is_causal=True, enable_gqa=True).float().sum()

    with xrt_torch.kernel_policy(attention=HOPPER_KERNEL, exec_policy=ON_CUDA):
        loss = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v)
        loss.backward()
        eager = step(*(t.detach().requires_grad_() for t in (q, k, v)))
    torch.testing.assert_close(loss, eager)
    assert q.grad is not None
    assert torch.isfinite(q.grad).all()


def test_explain_maps_the_hopper_kernels_to_their_own_library() -> None:
    # The Gluon forward and backward kernels (both backward paths: deterministic and fused),
    # then xrt_flash's Triton ones (which the Hopper backward runs at head size 256 and for
    # packed sequences): the names tell the libraries apart.
    hopper = ("_xrt_attn_fwd_hopper", "_xrt_attn_bwd_prep_hopper", "_xrt_attn_bwd_dkdv_hopper")
    fused = ("_xrt_attn_bwd_fused_hopper", "_xrt_attn_bwd_dq_convert_hopper")
    for name in (*hopper, "_xrt_attn_bwd_dq_hopper", *fused):
        assert kernel_library(name, "attention") == "xrt_attention_hopper", name
    for name in ("_xrt_attn_fwd", "_xrt_attn_bwd_delta", "_xrt_attn_bwd_dkdv", "_xrt_attn_bwd_dq"):
        assert kernel_library(name, "attention") == "xrt_attention", name
