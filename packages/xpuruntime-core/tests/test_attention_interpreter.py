"""xrt_flash's Triton kernels in Triton's CPU interpreter, against a float32 reference.

The same kernel source the GPU compiles runs here on CPU tensors, with float16/bfloat16
rounding emulated (bfloat16 as raw bits; see launch._fix_interpreter_bfloat16_dot). Small
tiles (interpreter_tiles) make short sequences cross several key blocks, the causal diagonal
and a partial last block; a few cases run the GPU's own tile shapes and the tensor-descriptor
(TMA) variant.

Triton chooses the interpreter when the kernels are defined, so this module runs only in a
process started with TRITON_INTERPRET=1 (``nox -s attention``); GPU tests skip there.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (nox -s attention)", allow_module_level=True)
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import xpuruntime.ops as ops  # noqa: E402
from xpuruntime.kernels.attention import launch  # noqa: E402
from xpuruntime.kernels.attention.tiles import TileConfig  # noqa: E402
from xpuruntime.policies import KernelPolicy  # noqa: E402
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError  # noqa: E402
from xpuruntime.runtime.record import ExecutionRecord  # noqa: E402

# Triton's interpreter converts one-element arrays to loop bounds (NumPy deprecates that).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

PIN = KernelPolicy(attention="xrt_flash")
# Largest absolute error allowed against the float32 reference, by input dtype: a few units
# in the last place of outputs of magnitude ~1 (float16: 2**-10, bfloat16: 2**-7).
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


def reference(q: Any, k: Any, v: Any, causal: bool, scale: float | None = None) -> tuple[Any, Any]:
    """float32 attention on (batch, heads, seq, dim) inputs: (output, natural-log lse)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.float() @ k.transpose(-1, -2) * scale
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def inputs(
    batch: int, heads: int, kv_heads: int, sq: int, sk: int, dim: int, dtype: Any, seed: int = 0
) -> tuple[Any, Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, sq, dim, generator=gen).to(dtype)
    k = torch.randn(batch, kv_heads, sk, dim, generator=gen).to(dtype)
    v = torch.randn(batch, kv_heads, sk, dim, generator=gen).to(dtype)
    return q, k, v


def grads_reference(
    q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float | None = None
) -> tuple[Any, ...]:
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out, _ = reference(*leaves, causal, scale)
    return torch.autograd.grad(out, leaves, do.float())


def assert_close(actual: Any, expected: Any, dtype: Any, what: str, factor: float = 1.0) -> None:
    error = (actual.float() - expected.float()).abs().max().item()
    scale = max(1.0, expected.float().abs().max().item())
    assert error <= TOLERANCE[dtype] * factor * scale, f"{what}: max |error| {error:.3g}"


CASES = [
    # (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim)
    pytest.param(1, 3, 3, 77, 77, 64, id="mha-64"),
    pytest.param(1, 4, 2, 50, 50, 128, id="gqa-128"),
    pytest.param(2, 3, 1, 33, 33, 64, id="mqa-64"),
    pytest.param(1, 2, 2, 40, 72, 64, id="cross-longer-keys"),
    pytest.param(1, 2, 1, 70, 24, 32, id="cross-shorter-keys"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
# bfloat16 runs in every other test; here its full matrix is in `nox -s attention_full`.
@pytest.mark.parametrize(
    "dtype",
    [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.interpreter_full)],
    ids=["fp16", "bf16"],
)
@pytest.mark.parametrize(("batch", "heads", "kv_heads", "sq", "sk", "dim"), CASES)
def test_forward_and_backward_match_float32(
    batch: int, heads: int, kv_heads: int, sq: int, sk: int, dim: int, dtype: Any, causal: bool
) -> None:
    q, k, v = inputs(batch, heads, kv_heads, sq, sk, dim, dtype)
    out, lse = ops.attention(q, k, v, causal=causal, layout="bhsd", return_lse=True, policy=PIN)
    ref_out, ref_lse = reference(q, k, v, causal)
    assert (out.shape, out.dtype, lse.dtype) == (q.shape, dtype, torch.float32)
    assert_close(out, ref_out, dtype, "output")
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)

    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    dq, dk, dv = ops.attention_backward(do, q, k, v, out, lse, causal=causal, layout="bhsd")
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    for name, got, want in zip(
        ("dq", "dk", "dv"), (dq, dk, dv), grads_reference(q, k, v, do, causal), strict=True
    ):
        assert_close(got, want, dtype, name, factor=2.0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [0.3, -1.0, 0.0])
def test_explicit_scale(scale: float, causal: bool) -> None:
    """Any sign: a negative scale runs on the negated query (scale_sign.query_for_scale); before,
    float16 P overflowed against the block's min score (max score x -1) and the output was
    NaN."""
    q, k, v = inputs(1, 2, 2, 40, 40, 64, torch.float16)
    out, lse = ops.attention(q, k, v, scale=scale, causal=causal, layout="bhsd", return_lse=True)
    ref_out, ref_lse = reference(q, k, v, causal, scale)
    assert_close(out, ref_out, torch.float16, "output")
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)
    do = torch.randn_like(out)
    grads = ops.attention_backward(do, q, k, v, out, lse, scale=scale, causal=causal, layout="bhsd")
    for got, want in zip(grads, grads_reference(q, k, v, do, causal, scale), strict=True):
        assert_close(got, want, torch.float16, "grad", factor=2.0)


def test_flash_layout_and_strided_views_run_without_copies() -> None:
    # (batch, seq, heads, dim) as FlashAttention takes it, and SDPA-layout views of it.
    q, k, v = inputs(2, 4, 2, 45, 45, 64, torch.bfloat16)
    bshd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    out = ops.attention(*bshd, causal=True)  # layout="bshd"
    ref_out, _ = reference(q, k, v, True)
    assert_close(out.transpose(1, 2), ref_out, torch.bfloat16, "bshd output")
    views = [t.transpose(1, 2) for t in bshd]  # bhsd-shaped, bshd memory
    assert not views[0].is_contiguous()
    out_view = ops.attention(*views, causal=True, layout="bhsd")
    torch.testing.assert_close(out_view, out.transpose(1, 2), atol=0, rtol=0)


def test_variable_length_batch_matches_each_sequence() -> None:
    lengths_q, lengths_k = [17, 0, 40, 5], [17, 3, 40, 29]
    heads, kv_heads, dim, dtype = 4, 2, 64, torch.float16
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(sum(lengths_q), heads, dim, generator=gen).to(dtype)
    k = torch.randn(sum(lengths_k), kv_heads, dim, generator=gen).to(dtype)
    v = torch.randn(sum(lengths_k), kv_heads, dim, generator=gen).to(dtype)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32)
    for causal in (False, True):
        out, lse = ops.attention(
            q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True
        )
        assert lse.shape == (heads, q.shape[0])
        do = torch.randn(out.shape, generator=gen).to(dtype)
        dq, dk, dv = ops.attention_backward(
            do, q, k, v, out, lse, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k
        )
        for i in range(len(lengths_q)):
            qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
            if lengths_q[i] == 0:
                continue
            seq = [t[s].transpose(0, 1).unsqueeze(0) for t, s in ((q, qs), (k, ks), (v, ks))]
            ref_out, ref_lse = reference(*seq, causal)
            assert_close(out[qs].transpose(0, 1), ref_out[0], dtype, f"sequence {i}")
            torch.testing.assert_close(lse[:, qs], ref_lse[0], atol=1e-3, rtol=1e-4)
            ref_grads = grads_reference(*seq, do[qs].transpose(0, 1).unsqueeze(0), causal)
            for name, got, want in zip(
                ("dq", "dk", "dv"), (dq[qs], dk[ks], dv[ks]), ref_grads, strict=True
            ):
                assert_close(
                    got.transpose(0, 1), want[0], dtype, f"{name} of sequence {i}", factor=2.0
                )
        # key rows of the sequence without queries get no gradient
        assert dk[cu_k[1] : cu_k[2]].abs().max().item() == 0.0


@pytest.mark.parametrize(
    "tiles",
    [
        TileConfig(128, 128, 8, 2, tma=True),  # TMA loads, 128x128 tiles
        TileConfig(128, 64, 4, 3),  # pointer loads, the Ampere forward
        TileConfig(64, 32, 4, 2, tma=True, warp_specialize=True),
    ],
    ids=lambda t: t.describe().replace(" ", "-"),
)
def test_gpu_tile_shapes_and_tma_variant(tiles: TileConfig) -> None:
    q, k, v = inputs(1, 2, 1, 150, 150, 64, torch.float16)
    for causal in (False, True):
        out, lse, detail = launch.forward(
            q, k, v, causal=causal, scale=None, layout="bhsd", tiles=tiles
        )
        assert tiles.describe() in detail
        ref_out, ref_lse = reference(q, k, v, causal)
        assert_close(out, ref_out, torch.float16, detail)
        torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)


def test_gpu_backward_tile_shapes() -> None:
    q, k, v = inputs(1, 4, 2, 150, 150, 64, torch.bfloat16)
    out, lse = ops.attention(q, k, v, causal=True, layout="bhsd", return_lse=True)
    do = torch.randn_like(out)
    tiles = (TileConfig(64, 128, 8, 3), TileConfig(128, 64, 8, 3))
    dq, dk, dv, _ = launch.backward(
        do, q, k, v, out, lse, causal=True, scale=None, layout="bhsd", tiles=tiles
    )
    for got, want in zip((dq, dk, dv), grads_reference(q, k, v, do, True), strict=True):
        assert_close(got, want, torch.bfloat16, "grad", factor=2.0)


def test_decision_and_record_name_the_kernel_and_tiles() -> None:
    q, k, v = inputs(1, 2, 2, 20, 20, 64, torch.float16)
    record = ExecutionRecord(kind="training")
    ops.attention(q, k, v, layout="bhsd", policy=PIN, record=record)
    decision = ops.last_decision()
    assert decision is not None
    assert (decision.kernel, decision.library, decision.mode) == (
        "xrt_flash",
        "xpuruntime Triton",
        "pin",
    )
    assert decision.shape == "[1, 20, 20, 2, 2, 64, 0, 0]"
    assert "triton forward BLOCK_M=" in decision.detail
    (entry,) = record.decisions
    assert entry.kernel == "xrt_flash"
    assert "triton forward" in entry.reason


def test_bad_inputs_get_clear_errors() -> None:
    q, k, v = inputs(1, 2, 2, 20, 20, 64, torch.float16)
    with pytest.raises(UnsupportedOperationError, match="float16 and bfloat16, not float32"):
        ops.attention(q.float(), k.float(), v.float(), layout="bhsd", policy=PIN)
    with pytest.raises(UnsupportedOperationError, match=r"multiple of key/value heads \(3\)"):
        ops.attention(q, *inputs(1, 3, 3, 20, 20, 64, torch.float16)[1:], layout="bhsd")
    with pytest.raises(InvalidArgumentError, match="key and value shapes differ"):
        ops.attention(q, k, v[:, :, :10], layout="bhsd")
    with pytest.raises(InvalidArgumentError, match="4-D"):
        ops.attention(q[0], k[0], v[0])
    with pytest.raises(InvalidArgumentError, match="both cu_seqlens_q and cu_seqlens_k"):
        ops.attention(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32))
    cu = torch.tensor([0, 2])
    with pytest.raises(InvalidArgumentError, match="int32"):
        ops.attention(q[0], k[0], v[0], cu_seqlens_q=cu, cu_seqlens_k=cu)
    out, lse = ops.attention(q, k, v, layout="bhsd", return_lse=True)
    with pytest.raises(InvalidArgumentError, match="log-sum-exp of shape"):
        ops.attention_backward(out, q, k, v, out, lse[0], layout="bhsd")
