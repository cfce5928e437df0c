"""xrt_flash_fp8, the float8 (e4m3) attention forward for inference.

Without Triton (the core's CPU test environment): registration and its order (the automatic
choice), the policy vocabulary, the support check's reasons, and a pinned policy's error.
In Triton's CPU interpreter (``TRITON_INTERPRET=1``, ``nox -s attention``), or on a GPU of
compute capability 8.9+ (the GPU machines' core suite): the kernels themselves, against
float32 references. float8 rounding there goes through
PyTorch's exact conversion (fp8._fix_interpreter_fp8_casts), so the interpreter computes
what the GPU's ``cvt.rn`` does; the GPU's own fp8 tensor cores run in
``benchmarks/attention_fp8_bench.py`` and ``scripts/gpu_phases/attention_fp8.sh``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from typing import Any

import pytest

import xpuruntime.runtime as rt
from xpuruntime.kernels.attention import (
    FP8_HOPPER_LIBRARY,
    FP8_KERNEL,
    FP8_LIBRARY,
    FP8_TRITON_LIBRARY,
    KERNEL,
    fp8_unsupported_reason,
    query_shape,
)
from xpuruntime.policies import KernelPolicy
from xpuruntime.policies.vocabulary import find_kernel
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError

PIN = KernelPolicy(attention=FP8_KERNEL)
# Triton's interpreter converts one-element arrays to loop bounds (NumPy deprecates that).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _kernel_device() -> str:
    """Where the fp8 kernels can run here: Triton's CPU interpreter, a GPU with fp8 tensor
    cores, or nowhere ('')."""
    if not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")):
        return ""
    if INTERPRETED:
        return "cpu"
    import torch

    fp8_gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    return "cuda" if fp8_gpu else ""


DEVICE = _kernel_device()
needs_kernels = pytest.mark.skipif(
    not DEVICE,
    reason="fp8 kernels run on a GPU of compute capability 8.9+ or in Triton's CPU interpreter "
    "(TRITON_INTERPRET=1 with torch and triton: nox -s attention)",
)


def _shape(**change: Any) -> list[int]:
    fields: dict[str, Any] = dict(
        batch=2, seqlen_q=64, seqlen_k=64, heads=8, kv_heads=2, head_dim=128, causal=False,
        varlen=False,
    )  # fmt: skip
    fields.update(change)
    return query_shape(**fields)


def test_fp8_is_registered_after_xrt_flash() -> None:
    # The automatic choice takes the first kernel that can run a call: float16/bfloat16 calls
    # stay on the exact kernel; only a policy naming the fp8 one runs it.
    names = [(k.name, k.library) for k in rt.dispatcher.kernels("attention")]
    assert names[1:3] == [(KERNEL, "xpuruntime Triton"), (FP8_KERNEL, FP8_LIBRARY)]


def test_policy_vocabulary_names_the_fp8_kernel() -> None:
    spec = find_kernel("attention", FP8_KERNEL)
    assert spec.devices == frozenset({"cuda"})
    assert spec.engines == frozenset({"xpuruntime"})
    assert PIN.get("attention") == FP8_KERNEL


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"dtype": "float32"}, "takes float16/bfloat16 inputs (quantized to float8 e4m3 inside)"),
        ({"head_dim": 32}, "head sizes 64, 128, 256, not 32"),
        ({"heads": 6, "kv_heads": 4}, "query heads (6) must be a multiple of key/value heads (4)"),
        ({"device": "cpu"}, "compute capability 8.9 or newer"),
        ({"device": "npu:0"}, "runs on CUDA devices, not npu:0"),
    ],
)
def test_fp8_unsupported_reasons(
    change: dict[str, Any], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    dtype, device = change.pop("dtype", "bfloat16"), change.pop("device", "cpu")
    assert expected in fp8_unsupported_reason("attention", _shape(**change), dtype, device)


def test_fp8_reason_for_other_ops_and_shapes() -> None:
    assert "implements attention, not matmul" in fp8_unsupported_reason(
        "matmul", _shape(), "bfloat16", "cuda:0"
    )
    assert "expects the attention query shape" in fp8_unsupported_reason(
        "attention", [1, 2], "bfloat16", "cuda:0"
    )


def test_pinned_fp8_that_cannot_run_raises_with_the_reason() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"pins attention to 'xrt_flash_fp8'.*32"):
        rt.dispatcher.resolve("attention", _shape(head_dim=32), "bfloat16", "cuda:0", PIN)


@pytest.mark.parametrize(
    ("precision", "policy", "error", "message"),
    [
        ("fp16", None, InvalidArgumentError, "precision 'fp16' is not one attention takes"),
        ("fp8", KernelPolicy(attention=KERNEL), InvalidArgumentError, "policy names 'xrt_flash'"),
        ("fp8", None, UnsupportedOperationError, r"pins attention to 'xrt_flash_fp8'.*8\.9"),
    ],
)
def test_precision_fp8_is_checked_before_anything_runs(
    precision: str,
    policy: KernelPolicy | None,
    error: type[Exception],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    import xpuruntime.ops as ops

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # CPU tensors: no fp8 here
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(error, match=message):
        ops.attention(q, q, q, precision=precision, policy=policy)  # type: ignore[arg-type]


# --- the kernels, in Triton's CPU interpreter --------------------------------------------


def _inputs(
    batch: int, heads: int, kv_heads: int, seq: int, dim: int, dtype: Any, seed: int = 0
) -> tuple[Any, Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, dim, generator=gen).to(DEVICE, dtype)
    k = torch.randn(batch, kv_heads, seq, dim, generator=gen).to(DEVICE, dtype)
    v = torch.randn(batch, kv_heads, seq, dim, generator=gen).to(DEVICE, dtype)
    return q, k, v


def _reference(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    """float32 attention on (batch, heads, seq, dim): (output, natural-log lse)."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    scores = q.float() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def _relative(actual: Any, expected: Any) -> float:
    return float((actual.float() - expected).norm() / expected.norm())


def _query_rows(detail: str) -> int:
    """Rows per query scale of the kernel that ran: the Gluon Hopper kernel quantizes the query
    per 64 rows beforehand, the Triton kernel per row inside."""
    from xpuruntime.kernels.attention import fp8

    return 64 if detail.startswith(fp8.HOPPER_DETAIL) else 1


def _lse_bound(detail: str) -> float:
    """How far the log-sum-exp of the kernel the detail names may be from the reference of
    its quantized inputs: 1e-2, and with the Gluon kernel's sums' GEMM (``u``) the rounding
    of P to e4m3 (each within 2**-4 of its value, so the sum O was normalised with is within
    log(1 / (1 - 2**-4)) of the exact one in log); with half bits (``b``) P is first the
    linear interpolation of 2**x within its octave times 2 ln(2)**2 (its mean excess taken
    off), at least 2 ln(2)**2 times 2**x."""
    from xpuruntime.kernels.attention import hopper

    match = re.search(r"warp-specialised, (\w+)", detail)
    variant = hopper.parse_variant(match.group(1)) if match is not None else None
    rounded = variant is not None and variant.sum_mma
    interpolated = variant is not None and variant.half_bits
    return (
        1e-2
        + (math.log(1 / (1 - 2**-4)) if rounded else 0.0)
        + (math.log(1 / (2 * math.log(2) ** 2)) if interpolated else 0.0)
    )


def _dequantized(qz: Any, q: Any, seq: int, rows: int = 1) -> tuple[Any, Any, Any]:
    """The real-valued tensors the fp8 kernel sees, (batch, heads, seq, dim): x8 · scale, and
    the query quantized as the kernel does, one scale per ``rows`` rows."""
    import torch

    from xpuruntime.kernels.attention import fp8

    batch, heads, length, dim = q.shape
    padded = -(-length // rows) * rows
    blocks = torch.nn.functional.pad(q.float(), (0, 0, 0, padded - length))
    amax = blocks.reshape(batch, heads, padded // rows, rows * dim).abs().amax(-1, keepdim=True)
    q_scale = torch.where(amax > 0, amax / 448, 1.0).repeat_interleave(rows, 2)[:, :, :length]
    q_real = (q.float() * (1.0 / q_scale)).to(fp8.FP8).float() * q_scale
    k = qz.k.float() * qz.k_scale.repeat_interleave(qz.block, 2)[:, :, :seq, None]
    v = fp8.sequential_value(qz).float().transpose(2, 3) * qz.v_scale[:, :, None, :]
    return q_real, k, v


@needs_kernels
@pytest.mark.parametrize(("kv_heads", "causal"), [(2, False), (1, True), (4, True)])
def test_fp8_forward_matches_the_reference_of_its_quantized_inputs(
    kv_heads: int, causal: bool
) -> None:
    import torch

    from xpuruntime.kernels.attention import fp8

    # Several key scale blocks: 32 rows in the interpreter (its tiles are small), 128 (what
    # the GPU's tiles divide) on a GPU.
    block, seq = (32, 70) if DEVICE == "cpu" else (128, 300)
    q, k, v = _inputs(2, 4, kv_heads, seq, 64, torch.bfloat16)
    qz = fp8.quantize(q, k, v, layout="bhsd", block=block)
    out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
    assert out.dtype == torch.bfloat16
    rows = _query_rows(detail)
    query = "query per row" if rows == 1 else f"query per {rows} rows"
    assert "fp8 e4m3 forward " in detail
    assert f"(scales: {query}, key per {block} rows" in detail
    exact_out, exact_lse = _reference(*_dequantized(qz, q, seq, rows), causal)
    # What remains is the probabilities' e4m3 rounding (3 mantissa bits) and bf16 output.
    assert _relative(out, exact_out) < 0.03
    assert (lse - exact_lse).abs().max().item() < 1e-2
    # Against the unquantized bf16 inputs: e4m3's error, about 5% on Gaussian data.
    true_out, true_lse = _reference(q, k, v, causal)
    assert _relative(out, true_out) < 0.08
    assert (lse - true_lse).abs().max().item() < 0.2


@needs_kernels
def test_ops_attention_pinned_to_fp8_runs_and_records_it() -> None:
    import torch

    import xpuruntime.ops as ops
    from xpuruntime.runtime.record import ExecutionRecord

    q, k, v = _inputs(1, 2, 2, 40, 64, torch.float16)
    record = ExecutionRecord(kind="inference")
    out = ops.attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), policy=PIN, record=record
    )
    assert out.dtype == torch.float16
    assert out.shape == (1, 40, 2, 64)
    assert _relative(out.transpose(1, 2), _reference(q, k, v, False)[0]) < 0.08
    (entry,) = record.decisions
    assert entry.kernel == FP8_KERNEL
    assert "fp8 e4m3 forward" in entry.reason
    # The library is the kernel's that ran (Gluon on sm_90, Triton elsewhere), as its detail.
    ran = ops.last_decision()
    assert ran is not None
    gluon = ran.detail.startswith("gluon hopper fp8")
    assert ran.library == (FP8_HOPPER_LIBRARY if gluon else FP8_TRITON_LIBRARY)
    # precision="fp8" takes the same kernel without naming it.
    ops.attention(q, k, v, layout="bhsd", precision="fp8")
    decision = ops.last_decision()
    assert decision is not None
    assert decision.kernel == FP8_KERNEL
    # Without a policy the same call stays on an exact kernel (the Hopper forward on sm_90).
    ops.attention(q, k, v, layout="bhsd")
    decision = ops.last_decision()
    assert decision is not None
    assert decision.kernel in (KERNEL, "xrt_flash_hopper")
    grad = out.transpose(1, 2)
    with pytest.raises(UnsupportedOperationError, match="forward for inference"):
        ops.attention_backward(
            grad, q, k, v, grad, torch.zeros(1, 2, 40, device=DEVICE), layout="bhsd", policy=PIN
        )


@needs_kernels
def test_fp8_packed_sequences_with_an_empty_one() -> None:
    import torch

    import xpuruntime.ops as ops

    lengths = [40, 0, 50, 1]
    cu = torch.tensor([0, 40, 40, 90, 91], dtype=torch.int32, device=DEVICE)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(91, 4, 64, generator=gen).to(DEVICE, torch.float16)
    k, v = (torch.randn(91, 2, 64, generator=gen).to(DEVICE, torch.float16) for _ in range(2))
    out, lse = ops.attention(
        q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, return_lse=True, policy=PIN
    )
    for start, length in zip(cu[:-1].tolist(), lengths, strict=True):
        if not length:
            continue
        rows = slice(start, start + length)
        qs, ks, vs = (x[rows].transpose(0, 1)[None] for x in (q, k, v))
        want, want_lse = _reference(qs, ks, vs, True)
        assert _relative(out[rows].transpose(0, 1)[None], want) < 0.08
        assert (lse[:, rows] - want_lse[0]).abs().max().item() < 0.2


@needs_kernels
def test_e4m3_inputs_with_descale_factors() -> None:
    import torch

    from xpuruntime.kernels.attention import fp8

    q, k, v = (x.float() * 3 for x in _inputs(2, 4, 2, 33, 64, torch.float32))
    descale = [(x.abs().amax() / 448).reshape(1) for x in (q, k, v)]
    q8, k8, v8 = ((x / d).to(fp8.FP8) for x, d in zip((q, k, v), descale, strict=True))
    per_head = descale[1].expand(2, 2).contiguous()  # one factor per (batch, kv head)
    qz = fp8.from_fp8(q8, k8, v8, (descale[0], per_head, descale[2]), layout="bhsd")
    # The Gluon Hopper kernel reads the scales from_fp8 wrote, with no copy per call.
    g = fp8._geometry(qz.q, qz.k, "bhsd", None)
    q_in, q_scale = fp8._hopper_query(qz, g)
    scales = fp8._hopper_scales(qz, g, q_scale)
    assert q_in is qz.q
    for read, written in zip(
        (scales.q, scales.k, scales.v), (qz.q_scale, qz.k_scale, qz.v_scale), strict=True
    ):
        assert read.data_ptr() == written.data_ptr()
        assert read.is_contiguous()
    assert scales.k.shape == (2, 2, 1)
    assert scales.v_per_head  # one value scale a (batch, kv head), folded into the rows'
    assert scales.v.shape == (2, 2)
    # quantize's value scales differ by channel: the kernel reads each.
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    channels = fp8._hopper_scales(fp8.quantize(qb, kb, vb, layout="bhsd"), g, q_scale)
    assert not channels.v_per_head
    assert channels.v.shape == (2, 2, 64)
    out, _, detail = fp8.forward(qz, causal=False, scale=None, layout="bhsd")
    assert out.dtype == torch.bfloat16
    assert "e4m3 inputs, descale per (batch, key/value head)" in detail
    qr, kr, vr = (x8.float() * d for x8, d in zip((q8, k8, v8), descale, strict=True))
    assert _relative(out, _reference(qr, kr, vr, False)[0]) < 0.03
    wrong = torch.ones(3, device=DEVICE)
    with pytest.raises(InvalidArgumentError, match=r"one per \(batch, key/value head\)"):
        fp8.from_fp8(q8, k8, v8, (descale[0], wrong, descale[2]), layout="bhsd")
    with pytest.raises(InvalidArgumentError, match="k_descale must be a float32 tensor"):
        fp8.from_fp8(q8, k8, v8, (descale[0], descale[1].double(), descale[2]), layout="bhsd")
    with pytest.raises(InvalidArgumentError, match="go with float8_e4m3fn inputs"):
        fp8.from_fp8(q, k, v, (descale[0], descale[1], descale[2]), layout="bhsd")


@pytest.mark.skipif(DEVICE != "cuda", reason="the GPU's own tiles: needs a GPU of 8.9+")
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_gpu_tiles_match_the_reference(dim: int, causal: bool) -> None:
    """The kernel the call chooses (on an H100/H200 at head size 128 the Gluon one) and the
    Triton kernel with this GPU's first tiles, each against the reference of its inputs."""
    import torch

    from xpuruntime.kernels.attention import fp8
    from xpuruntime.kernels.attention.tiles import fp8_candidates

    q, k, v = _inputs(2, 8, 2, 300, dim, torch.bfloat16)  # 300 rows: partial last blocks
    tiles = fp8_candidates(dim, torch.cuda.get_device_capability())[0]
    for qz, given in (
        (fp8.quantize(q, k, v, layout="bhsd"), None),
        (fp8.quantize(q, k, v, layout="bhsd", key_order="sequential"), tiles),
    ):
        out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd", tiles=given)
        assert given is None or detail.startswith(fp8.TRITON_DETAIL), detail
        assert torch.isfinite(out).all()
        exact_out, exact_lse = _reference(*_dequantized(qz, q, 300, _query_rows(detail)), causal)
        assert _relative(out, exact_out) < 0.03
        assert (lse - exact_lse).abs().max().item() < _lse_bound(detail)
        assert _relative(out, _reference(q, k, v, causal)[0]) < 0.08


@needs_kernels
def test_scale_blocks_no_tile_divides_are_refused() -> None:
    import torch

    from xpuruntime.kernels.attention import fp8

    q, k, v = _inputs(1, 2, 2, 40, 64, torch.float16)
    qz = fp8.quantize(q, k, v, layout="bhsd", block=8)  # every tile has 16 rows or more
    with pytest.raises(InvalidArgumentError, match="key scales per 8 rows fit none"):
        fp8.forward(qz, causal=False, scale=None, layout="bhsd")


@needs_kernels
@pytest.mark.parametrize("scale", [-0.5, 0.0])
def test_negative_and_zero_scales_match_the_reference(scale: float) -> None:
    """The kernels take a block's max score before scaling it: a negative scale runs on the
    negated query (scale_sign.query_for_scale; before, e4m3 P saturated against the block's min
    score), a zero one weighs every key alike."""
    import torch

    from xpuruntime.kernels.attention import fp8

    q, k, v = _inputs(1, 2, 2, 130, 128, torch.bfloat16)
    qz = fp8.quantize(q, k, v, layout="bhsd")
    out, lse, detail = fp8.forward(qz, causal=False, scale=scale, layout="bhsd")
    q_real, k_real, v_real = _dequantized(qz, q, 130, _query_rows(detail))
    scores = q_real @ k_real.transpose(-1, -2) * scale
    assert _relative(out, torch.softmax(scores, -1) @ v_real) < 0.03, detail
    assert (lse - torch.logsumexp(scores, -1)).abs().max().item() < _lse_bound(detail)


HOPPER = DEVICE == "cuda" and __import__("torch").cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
@pytest.mark.parametrize("dim", [128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "variant",
    [
        "",
        "m64n128s2pp",
        "m64n128s2np_e4",
        "m64n128s3pp_e4",
        "m64n128s3pp_le4",
        "m64n128s3pp_pe4",
        "m64n128s3pp_pe4ru",
        "m64n128s3pp_pru",
        "m64n128s3np_pru",
        "m64n128s3np_lrub",
    ],
)
def test_hopper_fp8_kernel_matches_its_inputs_reference(
    dim: int, causal: bool, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an H100/H200 the Gluon kernel takes dense calls (bshd, grouped-query, a length that
    is not a multiple of a tile or of 16) and says so; its result is the float32 attention of
    the e4m3 tensors it was given, as close as the Triton kernel's."""
    import torch

    from xpuruntime.kernels.attention import fp8, hopper

    if variant:
        monkeypatch.setenv(hopper.FP8_VARIANT_ENV, variant)
    q, k, v = _inputs(2, 8, 2, 301, dim, torch.bfloat16)
    qz = fp8.quantize(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="bshd")
    out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bshd")
    assert detail.startswith(fp8.HOPPER_DETAIL), detail
    assert f"({variant or hopper.variant_names(dim, fp8=True)[0]})" in detail.replace(
        "warp-specialised, ", ""
    )
    assert "query per 64 rows" in detail
    exact_out, exact_lse = _reference(
        *_dequantized(fp8.quantize(q, k, v, layout="bhsd"), q, 301, 64), causal
    )
    assert _relative(out.transpose(1, 2), exact_out) < 0.03
    assert (lse - exact_lse).abs().max().item() < _lse_bound(detail)
    assert _relative(out.transpose(1, 2), _reference(q, k, v, causal)[0]) < 0.08
    # e4m3 inputs with per-tensor descales run it too.
    descale = [(x.float().abs().amax() / 448).reshape(1) for x in (q, k, v)]
    q8, k8, v8 = ((x.float() / d).to(fp8.FP8) for x, d in zip((q, k, v), descale, strict=True))
    out8, _, detail8 = fp8.forward(
        fp8.from_fp8(q8, k8, v8, tuple(descale), layout="bhsd"),
        causal=causal, scale=None, layout="bhsd",
    )  # fmt: skip
    assert detail8.startswith(fp8.HOPPER_DETAIL)
    assert "descale per tensor" in detail8
    real = [x8.float() * d for x8, d in zip((q8, k8, v8), descale, strict=True)]
    assert _relative(out8, _reference(*real, causal)[0]) < 0.03
    # The value's one scale a head, folded into the rows' normalisation, against the same
    # scale read per channel: the float32 products round apart by at most a bfloat16 step.
    z8 = fp8.from_fp8(q8, k8, v8, tuple(descale), layout="bhsd")
    by_channel = dataclasses.replace(z8, v_scale=z8.v_scale.contiguous())
    out_c = fp8.forward(by_channel, causal=causal, scale=None, layout="bhsd")[0]
    torch.testing.assert_close(out8, out_c, rtol=2**-7, atol=1e-6)


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
def test_hopper_fp8_repeated_calls_launch_the_first_calls_kernels_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dense call like an earlier one (shapes, strides, dtypes, alignment, settings)
    launches that call's kept kernels again without deciding afresh: on new inputs its
    result equals a fresh decision's, bit for bit; a setting in the key (the variant's
    environment variable, the mask) makes the call decide afresh."""
    import torch

    from xpuruntime.kernels.attention import fp8, hopper

    monkeypatch.delenv(hopper.FP8_VARIANT_ENV, raising=False)
    fp8._REPEATS.clear()
    q, k, v = _inputs(2, 8, 2, 301, 128, torch.bfloat16)
    out1, _, detail1 = fp8.forward(
        fp8.quantize(q, k, v, layout="bhsd"), causal=True, scale=None, layout="bhsd"
    )
    assert detail1.startswith(fp8.HOPPER_DETAIL)
    (kept,) = fp8._REPEATS.values()
    q2, k2, v2 = (x.flip(2).contiguous() for x in (q, k, v))
    second = fp8.quantize(q2, k2, v2, layout="bhsd")
    out2, lse2, detail2 = fp8.forward(second, causal=True, scale=None, layout="bhsd")
    assert detail2 == detail1
    (again,) = fp8._REPEATS.values()
    assert again is kept  # repeated: a call decided afresh stores a new entry
    import triton

    if triton.__version__.startswith("3.6."):  # the launcher layout gluon_launch reads
        # Both kernels repeat through launches laid out once, not arguments built per call.
        assert kept.attention.replay.bound is not None
        assert kept.quant is not None
        assert kept.quant.bound is not None
    assert not torch.equal(out1, out2)
    fp8._REPEATS.clear()
    fresh, fresh_lse, _ = fp8.forward(second, causal=True, scale=None, layout="bhsd")
    assert torch.equal(out2, fresh)
    assert torch.equal(lse2, fresh_lse)
    monkeypatch.setenv(hopper.FP8_VARIANT_ENV, "m64n128s3pp_pe4r")
    _, _, detail3 = fp8.forward(second, causal=True, scale=None, layout="bhsd")
    assert "(warp-specialised, m64n128s3pp_pe4r)" in detail3
    fp8.forward(second, causal=False, scale=None, layout="bhsd")
    assert len(fp8._REPEATS) == 3
    # An e4m3 query with broadcast descales (nothing quantized in the call) repeats too.
    monkeypatch.delenv(hopper.FP8_VARIANT_ENV)
    fp8._REPEATS.clear()
    descale = [(x.float().abs().amax() / 448).reshape(1) for x in (q, k, v)]
    q8, k8, v8 = ((x.float() / d).to(fp8.FP8) for x, d in zip((q, k, v), descale, strict=True))
    z = fp8.from_fp8(q8, k8, v8, tuple(descale), layout="bhsd")
    first8 = fp8.forward(z, causal=True, scale=None, layout="bhsd")
    (kept8,) = fp8._REPEATS.values()
    again8 = fp8.forward(z, causal=True, scale=None, layout="bhsd")
    (again8_entry,) = fp8._REPEATS.values()
    assert again8_entry is kept8
    assert torch.equal(first8[0], again8[0])
    assert first8[2] == again8[2]


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("seq_q", "seq_k"),
    [(1, 1), (300, 1), (1, 2), (1, 300), (7, 33), (130, 5), (256, 2)],
)
def test_hopper_fp8_kernel_takes_short_and_uneven_lengths(
    seq_q: int, seq_k: int, causal: bool
) -> None:
    """Short dense calls run the Gluon kernel too (one key, one query row, lengths inside a
    tile, more queries than keys): its result is the float32 attention of the e4m3 tensors
    it was given, causal masking top-left aligned. One key is the case Triton's
    specialisation of an argument equal to 1 broke (``_xrt_attn_fwd_hopper``'s comment)."""
    import torch

    from xpuruntime.kernels.attention import fp8

    q = _inputs(1, 4, 2, seq_q, 128, torch.bfloat16, seed=1)[0]
    _, k, v = _inputs(1, 4, 2, seq_k, 128, torch.bfloat16, seed=2)
    qz = fp8.quantize(q, k, v, layout="bhsd")
    out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
    assert detail.startswith(fp8.HOPPER_DETAIL), detail
    exact_out, exact_lse = _reference(*_dequantized(qz, q, seq_k, 64), causal)
    assert _relative(out, exact_out) < 0.03
    assert (lse - exact_lse).abs().max().item() < _lse_bound(detail)


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_fp8_half_bits_take_keys_far_below_the_max_as_zero(
    causal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With half bits (``b``) a key far below its row's max (2**-60 and 2**-200: past the
    16-bit field the bits are read from, where they would wrap) gets P = 0, as the exact
    exponential's e4m3 does, and a row's keys spread over the octaves of e4m3's range are
    weighted as the exponential weights them: the output is the reference of the quantized
    inputs', its error at most a third above the exponential variant's."""
    import torch

    from xpuruntime.kernels.attention import fp8, hopper

    torch.manual_seed(3)
    u = torch.nn.functional.normalize(torch.randn(128, device="cuda"), dim=0)
    q = (8 * u + 0.05 * torch.randn(1, 2, 640, 128, device="cuda")).bfloat16()
    # Scores in log2 of key j against the rows' max: 0 for key 0, then spread from -1 to -20,
    # and keys 100 and 300 at -60 and -200.
    below = torch.linspace(1, 20, 640, device="cuda")
    below[0], below[100], below[300] = 0, 60, 200
    k = (-below.view(1, 1, -1, 1) / 8 * math.sqrt(128) / math.log2(math.e) * u).bfloat16()
    k = k.expand(1, 2, 640, 128).contiguous()
    v = torch.randn(1, 2, 640, 128, device="cuda", dtype=torch.bfloat16)
    qz = fp8.quantize(q, k, v, layout="bhsd")
    exact_out, exact_lse = _reference(*_dequantized(qz, q, 640, 64), causal)
    errors = {}
    for name in ("m64n128s3np_prub", "m64n128s3np_pru"):
        monkeypatch.setenv(hopper.FP8_VARIANT_ENV, name)
        out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
        assert f"{name})" in detail, detail
        assert torch.isfinite(out).all()
        assert (lse - exact_lse).abs().max().item() < _lse_bound(detail)
        errors[name] = _relative(out, exact_out)
    assert errors["m64n128s3np_prub"] < 0.03
    assert errors["m64n128s3np_prub"] < 1.34 * errors["m64n128s3np_pru"] + 1e-3, errors


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
@pytest.mark.parametrize("variant", ["m64n128s3np_prub", "m64n128s3np_pub", "m64n128s3np_pru"])
@pytest.mark.parametrize("nan_key", [200, 50], ids=["key-block-1", "key-block-0"])
def test_hopper_fp8_nan_scores_make_their_rows_nan(
    variant: str, nan_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NaN key makes the output and log-sum-exp of every row that sees it NaN, as the
    reference's softmax does, with half bits (``b``, which read a NaN score as P = 0 and
    carry the NaN in the running max instead, lazy or not) as with exponentials; causal rows
    before it stay finite, those of its own key block (masked there) included. In key block
    0, full attention takes its unmasked softmax (every row sees the whole block), causal the
    masked one. (The key's scale stays finite: the quantizer's max passes NaN over.)"""
    import torch

    from xpuruntime.kernels.attention import fp8, hopper

    monkeypatch.setenv(hopper.FP8_VARIANT_ENV, variant)
    q, k, v = _inputs(1, 4, 4, 384, 128, torch.bfloat16, seed=5)
    k[:, :, nan_key] = float("nan")
    qz = fp8.quantize(q, k, v, layout="bhsd")
    for causal in (False, True):
        out, lse, detail = fp8.forward(qz, causal=causal, scale=None, layout="bhsd")
        assert f"{variant})" in detail, detail
        sees = torch.arange(384, device=out.device) >= (nan_key if causal else 0)
        assert torch.isnan(out[:, :, sees]).all()
        assert torch.isnan(lse[:, :, sees]).all()
        assert torch.isfinite(out[:, :, ~sees]).all()
        assert torch.isfinite(lse[:, :, ~sees]).all()


@pytest.mark.skipif(not HOPPER, reason="the Gluon fp8 kernel runs on sm_90 (H100, H200)")
def test_hopper_fp8_passes_other_head_sizes_packed_and_keyless_calls_to_triton() -> None:
    import torch

    from xpuruntime.kernels.attention import fp8
    from xpuruntime.kernels.attention.launch import Varlen

    q, k, v = _inputs(1, 4, 4, 300, 128, torch.bfloat16)
    _, _, detail = fp8.forward(
        fp8.quantize(q[..., :64], k[..., :64], v[..., :64], layout="bhsd"),
        causal=False, scale=None, layout="bhsd",
    )  # fmt: skip
    assert detail.startswith("triton fp8 e4m3 forward")
    assert "passed over: it takes head size 128, not 64" in detail
    out, lse, detail = fp8.forward(
        fp8.quantize(q, k[:, :, :0], v[:, :, :0], layout="bhsd"),
        causal=False, scale=None, layout="bhsd",
    )  # fmt: skip
    assert "passed over: no key" in detail
    assert not out.any()
    assert bool((lse == float("-inf")).all())

    rows = [x[0, :, :96].transpose(0, 1).contiguous() for x in (q, k, v)]  # (total, heads, dim)
    cu = torch.tensor([0, 40, 96], dtype=torch.int32, device=DEVICE)
    varlen = Varlen(cu, cu, 56, 56)
    qz = fp8.quantize(*rows, layout="thd", varlen=varlen)
    _, _, detail = fp8.forward(qz, causal=True, scale=None, layout="thd", varlen=varlen)
    assert detail.startswith("triton fp8 e4m3 forward")
    assert "Gluon Hopper fp8 kernel passed over: it takes dense batches" in detail


def test_hopper_key_order_is_the_kernels_and_round_trips() -> None:
    """The Gluon kernel's key order (its P operand's registers): a permutation of each group
    of 32 that the value quantization kernel's formula inverts, and ``sequential_value``
    undoes it, padding included (a length that is not a multiple of 32)."""
    torch = pytest.importorskip("torch")

    from xpuruntime.kernels.attention import fp8

    order = fp8.HOPPER_KEY_ORDER
    assert sorted(order) == list(range(32))
    # _fp8_kernels._xrt_attn_quant_vt stores each key at this position (HOPPER_ORDER).
    for key in range(32):
        position = (key & 0x11) | ((key & 0x8) >> 2) | ((key & 0x6) << 1)
        assert order[position] == key
    seq = 45
    source = torch.arange(2 * 3 * seq, dtype=torch.float32).reshape(2, 3, seq).to(fp8.FP8)
    vt = fp8._transposed_value((2, 3, seq), torch.device("cpu"), hopper=True)
    whole = fp8._whole_groups(vt).view(torch.uint8)
    whole.index_copy_(-1, fp8._positions(torch.device("cpu"), seq), source.view(torch.uint8))
    assert whole[..., 32:][..., [p for p, key in enumerate(order) if key >= seq - 32]].eq(0).all()
    ones = torch.ones(1, 1, 1)
    qz = fp8.Quantized(ones, ones, vt, None, ones, ones, torch.bfloat16, key_order="hopper")
    back = fp8.sequential_value(qz)
    assert torch.equal(back.view(torch.uint8), source.view(torch.uint8))
    with pytest.raises(InvalidArgumentError, match="key_order is 'auto' or 'sequential'"):
        fp8.quantize(ones, ones, ones, layout="bhsd", key_order="hopper")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="key_order must be"):
        fp8.Quantized(ones, ones, vt, None, ones, ones, torch.bfloat16, key_order="gluon")  # type: ignore[arg-type]
