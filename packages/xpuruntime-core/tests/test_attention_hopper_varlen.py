"""xrt_flash_hopper's forward and backward on packed variable-length batches (``cu_seqlens``),
on an sm_90 GPU.

Each case packs sequences of uneven lengths (shorter than a tile, on tile edges, empty, query
and key lengths apart) into (total, heads, head_dim) tensors and checks the Gluon forward's
output and log-sum-exp against a float32 reference computed sequence by sequence, and
against ``xrt_flash``'s own varlen forward (whose backward takes this log-sum-exp). Rows
that belong to no sequence must be left as they were: a tile that runs past its sequence's
end must store nothing there. The Gluon backward on packed sequences must give each
sequence the dense backward's gradients of that sequence alone, and zeros in rows of no
sequence.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from xpuruntime.kernels.attention import hopper, hopper_bwd, launch  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="interpreter run"),
    pytest.mark.skipif(
        not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
        reason="xrt_flash_hopper runs on sm_90 GPUs (H100/H200) only",
    ),
]

#: Rows past the last sequence, and their fill: the forward must leave them untouched.
SPARE_ROWS = 37
SENTINEL = 7.0
#: Max |error| of the output against the float32 reference, and of the log-sum-exp.
OUT_TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
LSE_TOL = 2e-3


def _pack(
    lens_q: list[int], lens_k: list[int], heads: int, kv_heads: int, dim: int, dtype: Any
) -> tuple[Any, ...]:
    """Packed query, key and value (with SPARE_ROWS rows of no sequence at the end) and their
    int32 offsets."""
    gen = torch.Generator(device="cuda").manual_seed(sum(lens_q) * 31 + dim)
    total_q, total_k = sum(lens_q) + SPARE_ROWS, sum(lens_k) + SPARE_ROWS

    def draw(rows: int, h: int) -> Any:
        return torch.randn(rows, h, dim, device="cuda", generator=gen).to(dtype)

    q, k, v = draw(total_q, heads), draw(total_k, kv_heads), draw(total_k, kv_heads)

    def offsets(lens: list[int]) -> Any:
        return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda").int()

    return q, k, v, offsets(lens_q), offsets(lens_k)


def _reference(
    q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, causal: bool, scale: float
) -> tuple[Any, Any]:
    """float32 output and natural-log log-sum-exp ((heads, total_q)), sequence by sequence;
    rows of no sequence are NaN (not compared). Causal is top-left within each sequence."""
    group = q.shape[1] // k.shape[1]
    out = torch.full(q.shape, float("nan"), device="cuda")
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device="cuda")
    for i in range(cu_q.numel() - 1):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        if q1 == q0:
            continue
        if k1 == k0:  # no key: zeros and -inf, as xrt_flash returns
            out[q0:q1] = 0.0
            lse[:, q0:q1] = float("-inf")
            continue
        qs = q[q0:q1].float().transpose(0, 1)
        ks = k[k0:k1].float().transpose(0, 1).repeat_interleave(group, 0)
        vs = v[k0:k1].float().transpose(0, 1).repeat_interleave(group, 0)
        s = qs @ ks.transpose(1, 2) * scale
        if causal:
            rows = torch.arange(q1 - q0, device="cuda")[:, None]
            cols = torch.arange(k1 - k0, device="cuda")[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        out[q0:q1] = (torch.softmax(s, -1) @ vs).transpose(0, 1)
        lse[:, q0:q1] = torch.logsumexp(s, -1)
    return out, lse


def _run(
    q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, lens_q: list[int], lens_k: list[int],
    causal: bool, scale: float | None = None, variant: str | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    out = torch.full_like(q, SENTINEL)
    got, lse = hopper.hopper_attention_forward(
        q, k, v, causal=causal, scale=scale, variant=variant, out=out,
        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=max(lens_q, default=0), max_seqlen_k=max(lens_k, default=0),
    )  # fmt: skip
    assert got is out
    return out, lse


def _check(
    got: Any, lse: Any, q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, causal: bool, scale: float
) -> None:
    ref, ref_lse = _reference(q, k, v, cu_q, cu_k, causal, scale)
    rows = int(cu_q[-1])
    assert torch.all(got[rows:] == SENTINEL), "rows of no sequence were written"
    assert not torch.isnan(got[:rows]).any(), "NaN in the output"
    err = (got[:rows].float() - ref[:rows]).abs().max().item()
    assert err < OUT_TOL[q.dtype], f"output max |error| {err}"
    want, have = ref_lse[:, :rows], lse[:, :rows]
    assert torch.equal(torch.isneginf(want), torch.isneginf(have)), "-inf rows differ"
    finite = torch.isfinite(want)
    if finite.any():
        lse_err = (have[finite] - want[finite]).abs().max().item()
        assert lse_err < LSE_TOL, f"log-sum-exp max |error| {lse_err}"


#: (query lengths, key lengths): tiles' edges (64/128/192 rows a CTA), shorter than one
#: tile, empty query or key sequences, and query lengths apart from key lengths.
LENGTHS = {
    "mixed": ([1000, 17, 513, 2048, 0, 300], [1000, 17, 513, 2048, 0, 300]),
    "edges": ([1, 63, 64, 65, 127, 128, 129, 191, 192, 193], [1, 63, 64, 65, 127, 128, 129, 191, 192, 193]),
    "q!=k": ([100, 700, 5, 256, 0], [300, 200, 5, 1, 9]),
    "no keys": ([70, 130, 40], [0, 260, 0]),
    "one short": ([5], [5]),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("case", list(LENGTHS))
def test_packed_forward_matches_a_per_sequence_reference(
    case: str, dim: int, causal: bool, dtype: Any
) -> None:
    lens_q, lens_k = LENGTHS[case]
    q, k, v, cu_q, cu_k = _pack(lens_q, lens_k, 16, 4, dim, dtype)  # GQA 4:1
    scale = 1.0 / math.sqrt(dim)
    got, lse = _run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal)
    _check(got, lse, q, k, v, cu_q, cu_k, causal, scale)


@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_variant_on_packed_sequences(dim: int, causal: bool) -> None:
    # Persistent and three-warpgroup variants included: tiles past a sequence are skipped
    # by every partition alike, or the pipeline's barriers would hang.
    lens_q, lens_k = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k = _pack(lens_q, lens_k, 8, 8, dim, torch.bfloat16)
    for name in hopper.variant_names(dim):
        got, lse = _run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal, variant=name)
        _check(got, lse, q, k, v, cu_q, cu_k, causal, 1.0 / math.sqrt(dim))


def _reference_grads(
    q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, causal: bool, scale: float, do: Any
) -> tuple[Any, Any, Any]:
    """float32 (dq, dk, dv) of the packed attention for the output gradient ``do``, by
    autograd sequence by sequence (causal top-left, as :func:`_reference`)."""
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    loss = qf.new_zeros(())
    for i in range(cu_q.numel() - 1):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        if q1 == q0 or k1 == k0:
            continue
        qs = qf[q0:q1].transpose(0, 1)
        ks = kf[k0:k1].transpose(0, 1).repeat_interleave(group, 0)
        vs = vf[k0:k1].transpose(0, 1).repeat_interleave(group, 0)
        s = qs @ ks.transpose(1, 2) * scale
        if causal:
            rows = torch.arange(q1 - q0, device="cuda")[:, None]
            cols = torch.arange(k1 - k0, device="cuda")[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        out = (torch.softmax(s, -1) @ vs).transpose(0, 1)
        loss = loss + (out * do[q0:q1].float()).sum()
    return torch.autograd.grad(loss, (qf, kf, vf), allow_unused=True)  # type: ignore[return-value]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_agrees_with_xrt_flash_varlen(causal: bool) -> None:
    """Same inputs through xrt_flash's varlen forward: outputs within rounding, and the same
    log-sum-exp (float32 statistics both), which xrt_flash's varlen backward then takes. The
    backward on our output and log-sum-exp is as close to a float32 reference as on
    xrt_flash's own (the gradients are large here, several units at this scale, so two bfloat16
    results differ by a few units in the last place: compared through their errors)."""
    lens_q, lens_k = [1000, 17, 513, 0, 300, 64], [900, 40, 513, 12, 300, 0]
    q, k, v, cu_q, cu_k = _pack(lens_q, lens_k, 32, 8, 128, torch.bfloat16)
    varlen = launch.Varlen(cu_q, cu_k, max(lens_q), max(lens_k))
    scale = 0.3  # explicit, not 1/sqrt(head_dim)
    want, want_lse, _ = launch.forward(
        q, k, v, causal=causal, scale=scale, layout="thd", varlen=varlen
    )
    got, lse = _run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal, scale=scale)
    _check(got, lse, q, k, v, cu_q, cu_k, causal, scale)
    rows = int(cu_q[-1])
    torch.testing.assert_close(got[:rows], want[:rows], atol=2e-2, rtol=0)
    torch.testing.assert_close(lse[:, :rows], want_lse[:, :rows], atol=1e-3, rtol=0)
    do = torch.randn_like(q)
    do[rows:] = 0
    ours = launch.backward(
        do, q, k, v, got, lse, causal=causal, scale=scale, layout="thd", varlen=varlen
    )
    theirs = launch.backward(
        do, q, k, v, want, want_lse, causal=causal, scale=scale, layout="thd", varlen=varlen
    )
    gluon = _packed_backward(do, q, k, v, got, lse, cu_q, cu_k, lens_q, lens_k, causal, scale)
    reference = _reference_grads(q, k, v, cu_q, cu_k, causal, scale, do)
    keys = int(cu_k[-1])
    for name, a, b, c, ref, n in zip(
        ("dq", "dk", "dv"), ours[:3], theirs[:3], gluon, reference, (rows, keys, keys),
        strict=True,
    ):  # fmt: skip
        theirs_err = (b[:n].float() - ref[:n]).abs().max().item()
        scale_of = ref[:n].abs().max().item()
        for who, x in (("xrt_flash on ours", a), ("gluon backward", c)):
            err = (x[:n].float() - ref[:n]).abs().max().item()
            assert err <= 1.25 * theirs_err + 1e-3 * scale_of, (
                f"{name} ({who}): max |error| {err} against xrt_flash's {theirs_err} (max "
                f"|{name}| {scale_of})"
            )


def _packed_backward(
    do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, cu_q: Any, cu_k: Any,
    lens_q: list[int], lens_k: list[int], causal: bool, scale: float | None = None,
) -> tuple[Any, Any, Any]:  # fmt: skip
    return hopper_bwd.hopper_attention_backward(
        do, q, k, v, out, lse, causal=causal, scale=scale, cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k, max_seqlen_q=max(lens_q, default=0),
        max_seqlen_k=max(lens_k, default=0),
    )  # fmt: skip


def _bhsd(x: Any) -> Any:
    """One sequence's packed (len, heads, dim) rows as the dense (1, heads, len, dim) view."""
    return x.transpose(0, 1).unsqueeze(0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("case", ["mixed", "edges", "q!=k", "no keys"])
def test_packed_backward_is_the_dense_backward_of_each_sequence(
    case: str, dim: int, causal: bool
) -> None:
    """The Gluon backward on packed sequences (the deterministic kernels on 2-D grids) gives
    each sequence, to the bit, what the dense backward with the same variant gives it alone:
    the same tiles in the same order, where the rows after a sequence's end (the next
    sequence's, here random) weigh exactly 0 as the dense kernels' padding does; and zeros in
    rows of no sequence, whatever the output gradient holds there and although the output
    and log-sum-exp hold NaN there (the forward leaves those rows unwritten)."""
    lens_q, lens_k = LENGTHS[case]
    q, k, v, cu_q, cu_k = _pack(lens_q, lens_k, 16, 4, dim, torch.bfloat16)  # GQA 4:1
    out, lse = _run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal)
    rows, keys = int(cu_q[-1]), int(cu_k[-1])
    out[rows:] = float("nan")
    lse[:, rows:] = float("nan")
    do = torch.randn_like(q)
    dq, dk, dv = _packed_backward(do, q, k, v, out, lse, cu_q, cu_k, lens_q, lens_k, causal)
    for name, grad, n in (("dq", dq, rows), ("dk", dk, keys), ("dv", dv, keys)):
        assert not grad[n:].any(), f"{name}: rows of no sequence are not zero"
        assert not grad[:n].isnan().any(), f"{name}: NaN"
    variant = hopper_bwd.choose_variant(dim, causal=causal, deterministic=False, packed=True)[0]
    for i in range(len(lens_q)):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        want = hopper_bwd.hopper_attention_backward(
            _bhsd(do[q0:q1]), _bhsd(q[q0:q1]), _bhsd(k[k0:k1]), _bhsd(v[k0:k1]),
            _bhsd(out[q0:q1]), lse[:, q0:q1].unsqueeze(0), causal=causal, variant=variant.name,
        )  # fmt: skip
        for name, got, ref in zip(
            ("dq", "dk", "dv"), (dq[q0:q1], dk[k0:k1], dv[k0:k1]), want, strict=True
        ):
            assert torch.equal(_bhsd(got), ref), f"{name} of sequence {i} ({variant.name})"


def test_packed_backward_in_float16_with_an_explicit_scale_is_repeatable() -> None:
    lens = [700, 3, 128, 0, 257]
    q, k, v, cu, _ = _pack(lens, lens, 8, 8, 128, torch.float16)
    out, lse = _run(q, k, v, cu, cu, lens, lens, True, scale=0.2)
    do = torch.randn_like(q)
    first = _packed_backward(do, q, k, v, out, lse, cu, cu, lens, lens, True, 0.2)
    again = _packed_backward(do, q, k, v, out, lse, cu, cu, lens, lens, True, 0.2)
    reference = _reference_grads(q, k, v, cu, cu, True, 0.2, do)
    rows = int(cu[-1])
    for name, a, b, ref in zip(("dq", "dk", "dv"), first, again, reference, strict=True):
        assert torch.equal(a, b), f"{name}: the deterministic kernels differ between runs"
        err = torch.linalg.vector_norm(a[:rows].float() - ref[:rows])
        rel = (err / torch.linalg.vector_norm(ref[:rows])).item()
        assert rel < 2e-3, f"{name}: relative error {rel} against the float32 reference"


def test_strided_inputs_given_stream_and_unaligned_out() -> None:
    """Query, key and value as views of one packed (total, 3, heads, dim) projection (strided
    rows, no copy), on a side stream, into an output TMA cannot address (padded rows): the
    same numbers as contiguous inputs, and the current stream left as it was."""
    lens = [300, 1, 129, 64]
    total, heads, dim = sum(lens), 8, 128
    qkv = torch.randn(total, 3, heads, dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.unbind(1)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda").int()
    plain, plain_lse = hopper.hopper_attention_forward(
        q.contiguous(), k.contiguous(), v.contiguous(), causal=True,
        cu_seqlens_q=cu, cu_seqlens_k=cu,
    )  # fmt: skip
    padded = torch.full((total, heads, dim + 2), SENTINEL, device="cuda", dtype=q.dtype)
    side = torch.cuda.Stream()
    before = torch.cuda.current_stream()
    side.wait_stream(before)
    got, lse = hopper.hopper_attention_forward(
        q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=300,
        max_seqlen_k=300, stream=side.cuda_stream, out=padded[..., :dim],
    )  # fmt: skip
    assert torch.cuda.current_stream() == before
    side.synchronize()
    assert torch.equal(got, plain)
    assert torch.equal(lse, plain_lse)
    assert torch.all(padded[..., dim:] == SENTINEL)
    _check(plain, plain_lse, q, k, v, cu, cu, True, 1.0 / math.sqrt(dim))


def test_no_sequence_or_no_key_at_all() -> None:
    q = torch.randn(10, 4, 64, device="cuda", dtype=torch.float16)
    empty = torch.zeros(3, dtype=torch.int32, device="cuda")
    out, lse = hopper.hopper_attention_forward(
        q, q, q, causal=False, cu_seqlens_q=empty, cu_seqlens_k=empty
    )
    assert lse.shape == (4, 10)
    assert torch.all(torch.isneginf(lse))
    grads = hopper_bwd.hopper_attention_backward(
        q, q, q, q, out, lse, causal=False, cu_seqlens_q=empty, cu_seqlens_k=empty
    )
    assert all(not g.any() for g in grads)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    out, lse = hopper.hopper_attention_forward(
        q, q[:0], q[:0], causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=empty[:3]
    )
    assert torch.all(out == 0)
    assert torch.all(torch.isneginf(lse))
    dq, dk, dv = hopper_bwd.hopper_attention_backward(
        q, q, q[:0], q[:0], out, lse, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=empty[:3]
    )
    assert not dq.any()
    assert dk.shape == dv.shape == (0, 4, 64)


def test_through_ops_attention_and_its_backward() -> None:
    """The user's path: a policy pinning xrt_flash_hopper runs packed calls on it, forward
    and backward (the Gluon backward's deterministic kernels), and the gradients match
    xrt_flash's."""
    import xpuruntime.ops as ops
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.runtime.record import ExecutionRecord

    lens = [1500, 17, 0, 513, 300]  # the longest past hopper_bwd.PACKED_CAUSAL_MIN_ROWS
    q, k, v, cu, _ = _pack(lens, lens, 16, 4, 128, torch.bfloat16)
    args: dict[str, Any] = {
        "causal": True, "cu_seqlens_q": cu, "cu_seqlens_k": cu, "max_seqlen_q": 1500,
        "max_seqlen_k": 1500,
    }  # fmt: skip
    record = ExecutionRecord(kind="training")
    pin = KernelPolicy(attention="xrt_flash_hopper")
    out, lse = ops.attention(q, k, v, return_lse=True, policy=pin, record=record, **args)
    want, want_lse = ops.attention(
        q, k, v, return_lse=True, policy=KernelPolicy(attention="xrt_flash"), **args
    )
    assert record.decisions[-1].kernel == "xrt_flash_hopper"
    assert "gluon hopper forward" in record.decisions[-1].reason
    rows = int(cu[-1])
    torch.testing.assert_close(out[:rows], want[:rows], atol=2e-2, rtol=0)
    torch.testing.assert_close(lse[:, :rows], want_lse[:, :rows], atol=1e-3, rtol=0)
    do = torch.randn_like(q)
    grads = ops.attention_backward(do, q, k, v, out, lse, policy=pin, record=record, **args)
    assert (
        "gluon hopper backward (dK/dV + dQ kernels, deterministic, on 2-D grids: packed "
        "sequences take these)" in record.decisions[-1].reason
    ), record.decisions[-1].reason
    expected = ops.attention_backward(do, q, k, v, want, want_lse, **args)
    for name, a, b in zip(("dq", "dk", "dv"), grads, expected, strict=True):
        torch.testing.assert_close(a[:rows], b[:rows], atol=5e-2, rtol=0, msg=name)
