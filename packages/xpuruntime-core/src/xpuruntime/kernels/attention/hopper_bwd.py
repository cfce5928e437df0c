"""Host side of the Gluon Hopper backward (:mod:`._hopper_bwd_kernels`): checks, variants, launch.

Two paths, both Gluon, both after a prep launch that writes delta = scale · rowsum(dO ∘ O)
and lse · log2(e) into buffers padded to 128 query rows:

- *fused*: one kernel per 128 keys computes dK, dV and each query block's dQ contribution
  (5 GEMMs per block pair, FlashAttention-3's count) and adds the latter into a zeroed
  float32 accumulator (by the copy engine's reduce-add, or the consumers' vector
  reductions); a last small launch converts it into dQ. The order of the float32 additions
  varies from run to run, so dQ is not bitwise reproducible.
- *deterministic*: the dK/dV kernel, then a dQ kernel that recomputes S and dP (7 GEMMs per
  block pair, no atomics). Packed variable-length sequences always take this path, on 2-D
  grids.

Which runs: the variant named (argument, else ``XPURUNTIME_HOPPER_ATTENTION_BWD_VARIANT``),
else the default of the head size and mask, measured on an H200 (``_DEFAULT``: the fused
kernel with its dQ writer warp, on 1-D longest-first grids at head size 128 causal);
``deterministic=True`` (the launcher passes ``torch.are_deterministic_algorithms_enabled()``)
replaces a fused choice by the deterministic default of the head size and mask
(:func:`choose_variant`).

Like :mod:`.hopper`, torch and Triton are imported inside the functions that need them, and
the variant table is plain data that the offline compile script reads without torch.

Variants name the tiles. Fused: ``fm{query rows per step}s{ring stages}{c|k}[t]``, ``c`` when
the two consumer warpgroups share dSᵀ through shared memory and each adds half of dQ's
columns over all 128 keys (one atomic per element and key block), ``k`` when each adds all
columns over its own 64 keys (two, but no cross-warpgroup barrier); ``t`` (with ``c``) stages
dQ in shared memory for the copy engine's reduce-add (TMA) instead of the consumers' own
vector reductions, and ``o`` (with ``t``) issues each step's successor's Sᵀ GEMM behind its
(first) dQ GEMMs; ``w`` (with ``c``) stages it likewise for a writer warp that issues the
reduce-adds, and the steps take FlashAttention-3's order (one meeting of the warpgroups a
step, dV and dK issued around the dQ GEMMs), ``o`` with it the successor's Sᵀ behind dK. Deterministic: ``m{query rows per dK/dV
step}s{its ring stages}n{key rows per dQ step}s{its ring stages}``, with ``o`` after the
dK/dV kernel's stages when each of
its steps issues the next step's Sᵀ GEMM behind its dK GEMM. A trailing ``_l`` launches the
kernels on 1-D grids in L2 sections, each section's heads interleaved block by block with the
longest blocks first (the first key blocks, the last query blocks when causal), so the
hardware deals the causal triangle's long CTAs before its short ones across heads, not head
by head (whose sawtooth leaves SMs idle at the end); without it, 2-D grids (blocks, batch x
heads).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.kernels.attention import gluon_launch
from xpuruntime.kernels.attention.hopper import (
    _check,
    _descriptor,
    _packed_lengths,
    _tma_ready,
    l2_section,
    rows_as_heads,
    tma_addressable,
)
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError

if TYPE_CHECKING:
    import torch

__all__ = [
    "HEAD_DIMS",
    "PACKED_CAUSAL_MIN_ROWS",
    "VARIANT_ENV",
    "BwdVariant",
    "FusedVariant",
    "choose_variant",
    "hopper_attention_backward",
    "parse_variant",
    "variant_names",
]

VARIANT_ENV = "XPURUNTIME_HOPPER_ATTENTION_BWD_VARIANT"
_LOG2E = 1.4426950408889634
#: Key rows of one dK/dV CTA and query rows of one dQ CTA (two consumer warpgroups of 64).
_CTA_ROWS = 128
_WG_ROWS = 64


@dataclass(frozen=True)
class FusedVariant:
    """One compiled shape of the fused kernel (see the module docstring for the name)."""

    block_m: int
    stages: int
    split_cols: bool
    tma_dq: bool = False
    #: One CTA per key block on a 1-D grid, longest first (``_l``).
    lpt: bool = False
    #: Each step issues the next step's Sᵀ GEMM behind its dQ GEMMs (``o`` with ``t``) or
    #: its dK GEMM (``o`` with ``w``).
    overlap: bool = False
    #: dQ by the copy engine, its reduce-adds issued by a writer warp (``w``, with ``c``).
    dq_writer: bool = False
    consumer_regs: int = 240
    producer_regs: int = 24

    @property
    def name(self) -> str:
        split = "c" if self.split_cols else "k"
        dq = "w" if self.dq_writer else "t" if self.tma_dq else ""
        flags = dq + ("o" if self.overlap else "")
        return f"fm{self.block_m}s{self.stages}{split}{flags}" + ("_l" if self.lpt else "")


@dataclass(frozen=True)
class BwdVariant:
    """One compiled shape of the deterministic path's two kernels (see the module docstring
    for the name)."""

    dkdv_block_m: int
    dkdv_stages: int
    dq_block_n: int
    dq_stages: int
    #: Both kernels on 1-D grids, longest blocks first (``_l``).
    lpt: bool = False
    #: The dK/dV step issues the next step's Sᵀ GEMM behind its dK GEMM (``o``).
    dkdv_overlap: bool = False
    consumer_regs: int = 240
    producer_regs: int = 24

    @property
    def name(self) -> str:
        dkdv = f"m{self.dkdv_block_m}s{self.dkdv_stages}{'o' if self.dkdv_overlap else ''}"
        return f"{dkdv}n{self.dq_block_n}s{self.dq_stages}" + ("_l" if self.lpt else "")


#: Candidates per head size, each kind's full-attention default first (the causal defaults are
#: :data:`_DEFAULT`'s; ``scripts/hopper_attention_bwd_compile.py``
#: compiles them; 128-row steps spill on both head sizes and are left out, as are the fused
#: ``k`` steps at head size 128; there the fused ``t`` steps spill 116-148 bytes, the ``w``
#: steps 44-64: a few scalars reloaded a step, no accumulator; ``wo`` makes ptxas serialise
#: the wgmmas there, so it is a head-size-64 candidate, compiled clean but not yet timed).
_FUSED: dict[int, tuple[str, ...]] = {
    64: ("fm64s3cw", "fm64s2cw", "fm64s3cwo", "fm64s2cto", "fm64s2ct", "fm64s2c", "fm64s2ct_l"),
    128: ("fm64s2cw", "fm64s2cw_l", "fm64s3ct", "fm64s3c"),
}
_DETERMINISTIC: dict[int, tuple[str, ...]] = {
    64: ("m64s3on64s3", "m64s2n64s2", "m64s2n128s2", "m64s3n64s3", "m64s2n64s2_l"),
    128: ("m64s3on64s3", "m64s2n64s2", "m64s2n128s2", "m64s3n64s3", "m64s2n64s2_l"),
}
#: What runs when neither a variant is named nor determinism asked for, by (head size,
#: causal): the fused kernel with its writer warp (``w``) at both head sizes, measured on an
#: H200 against cuDNN's backward in the same process (``scripts/hopper_attention_bwd_check.py
#: --set grid --variants ...``, kernels alone, S 2048 / 4096 / 8192 / 16384, bfloat16):
#: head size 128 full ``fm64s2cw`` 1.01 / 1.02 / 1.03 / 1.04x (``fm64s3cw`` 0.99-1.02x, the
#: copy-engine steps without the writer ``fm64s3ct`` 0.83-0.85x, the deterministic
#: ``m64s3on64s3`` 0.91-0.98x); causal ``fm64s2cw_l`` 1.04 / 1.06 / 1.04 / 1.01x (its 2-D
#: grids 0.98-1.02x, ``m64s2n64s2_l`` 0.89-0.95x); head size 64 full ``fm64s3cw`` 1.04 /
#: 1.01 / 1.02 / 1.08x (``fm64s2cw`` 1.00-1.07x, the former default ``fm64s2cto`` 0.99-1.08x);
#: causal ``fm64s2cw`` 1.10 / 1.09 / 1.07 / 1.03x (``fm64s2ct`` 1.01-1.05x; the 1-D grids
#: 1.02-1.08x). Before the writer warp, the fused kernel at head size 128 kept the tensor
#: pipe busy half the time (116-148 bytes of spills, each consumer waiting for its own
#: reduce-adds to read their staging tiles), and the deterministic path's 7 GEMMs a block
#: pair won.
_DEFAULT: dict[tuple[int, bool], str] = {
    (64, False): "fm64s3cw",
    (64, True): "fm64s2cw",
    (128, False): "fm64s2cw",
    (128, True): "fm64s2cw_l",
}
#: The deterministic path's default, by (head size, causal): what runs in a fused default's
#: place under ``deterministic``.
_DETERMINISTIC_DEFAULT: dict[tuple[int, bool], str] = {
    (64, False): "m64s3on64s3",
    (64, True): "m64s2n64s2",
    (128, False): "m64s3on64s3",
    (128, True): "m64s2n64s2_l",
}
HEAD_DIMS = tuple(_FUSED)
#: Packed causal batches whose longest sequence has fewer query rows run xrt_flash's Triton
#: varlen backward instead (:func:`.launch.hopper_backward_plan`). On an H200
#: (``benchmarks/attention_varlen_backward.py``, 16k tokens, GQA 4:1, bfloat16) the Gluon
#: kernels' 2-D grids took 1.02x / 1.11x xrt_flash's time at head size 64 / 128 with causal
#: sequences of mean 512 (longest 841 / 873), where most of a short sequence's CTAs find
#: no work, and 0.91x / 0.85x with mean 2048 (longest 3017 / 3356); full attention was
#: faster at both lengths (0.78-0.96x).
PACKED_CAUSAL_MIN_ROWS = 1024


def variant_names(head_dim: int) -> tuple[str, ...]:
    """The candidate variants of ``head_dim``: the fused ones, then the deterministic ones,
    each kind's full-attention default first."""
    return _FUSED[head_dim] + _DETERMINISTIC[head_dim]


def parse_variant(name: str) -> FusedVariant | BwdVariant:
    """``fm64s2ct`` -> FusedVariant(64, 2, True, True); ``m64s2n64s2`` -> BwdVariant(64, 2, 64, 2)."""
    fused = re.fullmatch(r"fm(\d+)s(\d+)([ck])([tw]?)(o?)(_l)?", name.strip())
    if fused is not None:
        rows, stages = int(fused.group(1)), int(fused.group(2))
        split, dq, overlap = fused.group(3) == "c", fused.group(4), fused.group(5) == "o"
        if rows != 64 or stages not in (2, 3, 4) or (dq and not split) or (overlap and not dq):
            raise InvalidArgumentError(
                f"hopper attention backward variant {name!r}: fused steps of 64 rows, stages "
                "2-4, t or w (dQ by the copy engine, w: issued by a writer warp) only with c, "
                "o (overlapped steps) only with t or w"
            )
        return FusedVariant(
            rows,
            stages,
            split,
            tma_dq=dq != "",
            lpt=fused.group(6) is not None,
            overlap=overlap,
            dq_writer=dq == "w",
        )
    match = re.fullmatch(r"m(\d+)s(\d+)(o?)n(\d+)s(\d+)(_l)?", name.strip())
    if match is None:
        raise InvalidArgumentError(
            f"hopper attention backward variant {name!r} is neither fused "
            "(fm<query rows>s<stages><c|k>[t|w][o][_l]) nor deterministic "
            "(m<query rows>s<stages>[o]n<key rows>s<stages>[_l])"
        )
    rows, row_stages, keys, key_stages = (int(match.group(i)) for i in (1, 2, 4, 5))
    if rows not in (64, 128) or keys not in (64, 128) or not {row_stages, key_stages} <= {2, 3, 4}:
        raise InvalidArgumentError(
            f"hopper attention backward variant {name!r}: rows 64/128, stages 2-4"
        )
    return BwdVariant(
        rows,
        row_stages,
        keys,
        key_stages,
        lpt=match.group(6) is not None,
        dkdv_overlap=match.group(3) == "o",
    )


def choose_variant(
    head_dim: int,
    *,
    causal: bool,
    deterministic: bool,
    given: str | None = None,
    packed: bool = False,
) -> tuple[FusedVariant | BwdVariant, str]:
    """(the variant that runs, where it comes from): ``given``, else
    ``XPURUNTIME_HOPPER_ATTENTION_BWD_VARIANT``, else the default of the head size and mask
    (``"default"``). Under ``deterministic`` a fused variant, named or default, gives way to
    the deterministic default, and the second value says so when it was named. ``packed``
    (variable-length sequences), which only the deterministic kernels' 2-D grids take: a
    fused variant gives way to the deterministic default as under ``deterministic``, and an
    ``_l`` one runs as its 2-D twin (the second value says so when it was named)."""
    name, origin = given, "given"
    if not name and os.environ.get(VARIANT_ENV):
        name, origin = os.environ[VARIANT_ENV], f"from {VARIANT_ENV}"
    if not name:
        name, origin = _DEFAULT[head_dim, causal], "default"
    chosen = parse_variant(name)
    if (deterministic or packed) and isinstance(chosen, FusedVariant):
        why = "not deterministic" if deterministic else "packed sequences take deterministic ones"
        passed = "" if origin == "default" else f"; {name} {origin} is fused, {why}"
        chosen, origin = parse_variant(_DETERMINISTIC_DEFAULT[head_dim, causal]), f"default{passed}"
    if packed and chosen.lpt:
        chosen = dataclasses.replace(chosen, lpt=False)
        if not origin.startswith("default"):
            origin += " (its 2-D grids on packed sequences)"
    return chosen, origin


@dataclass(frozen=True)
class _Packed:
    """A packed batch of variable-length sequences: offsets, the longest lengths (the
    grids'), and where each sequence's rows of the lse₂ and delta buffers start (``cu_pad``:
    query counts rounded up to 128 rows, so that every sequence starts on a row TMA can load
    from and has a dense call's padding) in buffers of ``pad_rows`` rows."""

    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int
    cu_pad: torch.Tensor
    pad_rows: int

    @property
    def batch(self) -> int:
        return self.cu_q.numel() - 1


def _padded(
    cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, total_q: int
) -> _Packed:
    """:class:`_Packed` of checked offsets; ``cu_pad`` is computed on the current stream,
    ``pad_rows`` bounds the padded lengths' sum without reading the offsets (no sync)."""
    import torch

    lengths = (cu_q[1:] - cu_q[:-1] + _CTA_ROWS - 1) // _CTA_ROWS * _CTA_ROWS
    cu_pad = torch.zeros_like(cu_q)
    cu_pad[1:] = torch.cumsum(lengths, 0, dtype=torch.int32)
    rows = (math.ceil(total_q / _CTA_ROWS) + cu_q.numel() - 1) * _CTA_ROWS
    return _Packed(cu_q, cu_k, max_q, max_k, cu_pad, rows)


def _check_like(name: str, x: torch.Tensor, q: torch.Tensor) -> None:
    if x.shape != q.shape or x.dtype != q.dtype or x.device != q.device or x.stride(-1) != 1:
        raise InvalidArgumentError(
            f"hopper attention backward: {name} is {tuple(x.shape)} {x.dtype} on {x.device}; it "
            f"must be the query's {tuple(q.shape)} {q.dtype} on {q.device}, unit-stride in the "
            "head dimension"
        )


def _check_lse(lse: torch.Tensor, q: torch.Tensor, packed: bool) -> None:
    import torch

    expected = (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[1], q.shape[2])
    if tuple(lse.shape) != expected or lse.dtype != torch.float32 or lse.device != q.device:
        raise InvalidArgumentError(
            f"hopper attention backward: lse is {tuple(lse.shape)} {lse.dtype} on {lse.device}; "
            f"it must be float32 {expected} on {q.device} (the forward's log-sum-exp)"
        )


def _gradient_like(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor shaped as ``x`` that TMA can store to (x's strides if dense)."""
    import torch

    grad = torch.empty_like(x)
    return grad if tma_addressable(grad) else torch.empty(x.shape, dtype=x.dtype, device=x.device)


def hopper_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    variant: str | None = None,
    deterministic: bool = False,
    stream: int | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of softmax(scale · Q Kᵀ) V for the output gradient ``grad_out``.

    Conventions are :func:`.hopper.hopper_attention_forward`'s: ``q``, ``out`` and
    ``grad_out`` (batch, heads, seqlen_q, head_dim), ``k`` and ``v`` (batch, kv_heads,
    seqlen_k, head_dim), bfloat16 or float16, unit-stride head dimension, causal masking top
    left; ``lse`` is the forward's float32 (batch, heads, seqlen_q) natural-log log-sum-exp.
    dk and dv are summed over the query heads that share each key/value head. Head sizes 64
    and 128. ``variant`` (default: ``XPURUNTIME_HOPPER_ATTENTION_BWD_VARIANT`` or the default
    of the head size and mask) picks the path, the tiles and the grid order; ``deterministic``
    keeps to the
    deterministic path (:func:`choose_variant`); ``stream`` (a raw ``cudaStream_t``;
    default: the current stream) is the stream the work runs on.

    Packed variable-length batches, as :func:`.hopper.hopper_attention_forward_run` takes
    them: with ``cu_seqlens_q``/``cu_seqlens_k`` the query, ``out`` and ``grad_out`` are
    (total_q, heads, head_dim), the key and value (total_k, kv_heads, head_dim), ``lse``
    (heads, total_q), and the gradients come packed the same way, zero in rows of no
    sequence; ``max_seqlen_q``/``max_seqlen_k`` size the grids (read from the offsets when
    not given: a device sync). They run the deterministic kernels on 2-D grids (a fused or
    ``_l`` variant, named or default, gives way: :func:`choose_variant`), and read the rows
    after a sequence's end with weight 0, as the forward does: those must be finite.
    """
    import torch

    offsets = None
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        offsets = _packed_lengths(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _check(q, k, v, offsets is not None)
    _check_like("grad_out", grad_out, q)
    _check_like("out", out, q)
    _check_lse(lse, q, offsets is not None)
    head_dim = q.shape[-1]
    if offsets is not None:
        batch, heads, seqlen_q, seqlen_k = offsets[0].numel() - 1, q.shape[1], *offsets[2:]
    else:
        batch, heads, seqlen_q, seqlen_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if head_dim not in _FUSED:
        raise UnsupportedOperationError(
            f"hopper attention backward supports head sizes {', '.join(map(str, HEAD_DIMS))}, "
            f"not {head_dim}"
        )
    if batch * heads > 65535:  # the grids' second dimension
        raise UnsupportedOperationError(
            f"hopper attention backward launches one CTA row per (batch, head): {batch * heads} "
            "is past CUDA's 65535 limit on a grid's y dimension"
        )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    config, _ = choose_variant(
        head_dim, causal=causal, deterministic=deterministic, given=variant,
        packed=offsets is not None,
    )  # fmt: skip
    from xpuruntime.kernels.attention.streams import on_device

    with on_device(q.device, stream):
        packed = None
        if offsets is not None:
            # Zeros: the kernels store the sequences' rows only.
            grads = [torch.zeros(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v)]
            if batch * heads == 0 or seqlen_q == 0 or seqlen_k == 0:
                return grads[0], grads[1], grads[2]
            # The kernels' 4-D views, (1, heads, total, head_dim).
            q, k, v, grad_out = (_tma_ready(rows_as_heads(x)) for x in (q, k, v, grad_out))
            out, (dq, dk, dv) = rows_as_heads(out), (rows_as_heads(g) for g in grads)
            packed = _padded(*offsets, total_q=q.shape[2])
            seqlen_pad = packed.pad_rows
            rows = heads  # of the lse₂ and delta buffers: one per head, sequences padded
            lse = lse.unsqueeze(0)
        else:
            q, k, v, grad_out = (_tma_ready(x) for x in (q, k, v, grad_out))
            dq, dk, dv = grads = [_gradient_like(x) for x in (q, k, v)]
            if batch * heads == 0 or seqlen_q == 0 or seqlen_k == 0:
                return dq.zero_(), dk.zero_(), dv.zero_()
            seqlen_pad = math.ceil(seqlen_q / _CTA_ROWS) * _CTA_ROWS
            rows = batch * heads
        lse2, delta = (
            torch.empty((rows, seqlen_pad), dtype=torch.float32, device=q.device) for _ in range(2)
        )
        _launch_prep(out, grad_out, lse.contiguous(), lse2, delta, scale, packed)
        if isinstance(config, FusedVariant) and batch * heads * seqlen_pad >= 2**31:
            # The reduce-add's row coordinate is 32-bit: the vector reductions take over
            # (without the overlapped steps or the writer warp, written for the reduce-add).
            config = dataclasses.replace(config, tma_dq=False, overlap=False, dq_writer=False)
        if isinstance(config, FusedVariant):
            dq_acc = torch.zeros(
                (batch * heads, seqlen_pad, head_dim), dtype=torch.float32, device=q.device
            )
            _launch_fused(config, q, k, v, grad_out, dk, dv, dq_acc, lse2, delta, causal, scale)
            _launch_convert(dq_acc, dq)
        else:
            _launch_dkdv(config, q, k, v, grad_out, dk, dv, lse2, delta, causal, scale, packed)
            _launch_dq(config, q, k, v, grad_out, dq, lse2, delta, causal, scale, packed)
    return grads[0], grads[1], grads[2]


def _launch_prep(
    out: torch.Tensor,
    grad_out: torch.Tensor,
    lse: torch.Tensor,
    lse2: torch.Tensor,
    delta: torch.Tensor,
    scale: float,
    packed: _Packed | None,
) -> None:
    """The prep kernel on 4-D views (packed: (1, heads, total, head_dim), the log-sum-exp
    (1, heads, total), one program row per (sequence, head) over its padded rows)."""
    from xpuruntime.kernels.attention import _hopper_bwd_kernels

    batch, heads, seqlen_q, head_dim = out.shape
    block = 64
    if packed is not None:
        grid = (math.ceil(packed.max_q / _CTA_ROWS) * _CTA_ROWS // block, packed.batch * heads)
        offsets = (packed.cu_q, packed.cu_pad)
    else:
        grid, offsets = (delta.shape[1] // block, batch * heads), (delta, delta)  # unused
    args = (
        out, grad_out, lse, lse2, delta,
        out.stride(0), out.stride(1), out.stride(2),
        grad_out.stride(0), grad_out.stride(1), grad_out.stride(2),
        seqlen_q, delta.shape[1], heads, scale, *offsets,
    )  # fmt: skip
    constants = {"HEAD_DIM": head_dim, "BLOCK": block, "VARLEN": packed is not None}
    gluon_launch.launch(_hopper_bwd_kernels._xrt_attn_bwd_prep_hopper, grid, args, constants)


@functools.cache
def _float32_layout(swizzle: int) -> Any:
    """Shared-memory layout of float32 tiles with ``swizzle``-byte swizzling (built once)."""
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=32, rank=2)


def _row_descriptor(x: torch.Tensor, rows: int) -> gluon_launch.Tma:
    """TMA descriptor of a padded float32 (batch x heads, seqlen_pad) buffer (packed: (heads,
    padded rows)), [1, rows] boxes."""
    return gluon_launch.Tma(x, (1, rows), _float32_layout(0))


def _block_grid(
    config: FusedVariant | BwdVariant,
    blocks: int,
    batch_heads: int,
    unit_bytes: int,
    heads_per_unit: int,
) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    """(grid, the kernel's order arguments: blocks, batch x heads, L2 section) of one CTA per
    block of each of ``batch_heads`` heads: a 2-D grid, or with ``_l`` a 1-D one in L2
    sections of the heads whose streamed data (``unit_bytes`` per ``heads_per_unit`` heads,
    :func:`.hopper.l2_section`) fit in L2 together. CUDA's x dimension takes up to 2³¹ - 1."""
    if not config.lpt:
        return (blocks, batch_heads), (blocks, batch_heads, 1)
    if blocks * batch_heads >= 2**31:
        raise UnsupportedOperationError(
            f"hopper attention backward variant {config.name}: {blocks * batch_heads} CTAs "
            "do not fit a 1-D grid; name a variant without _l"
        )
    section = l2_section(unit_bytes, heads_per_unit, batch_heads)
    return (blocks * batch_heads,), (blocks, batch_heads, section)


def _key_block_grid(
    config: FusedVariant | BwdVariant, q: torch.Tensor, k: torch.Tensor
) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    """:func:`_block_grid` of the dK/dV and fused kernels: one CTA per 128 keys of each
    (batch, key/value head), each streaming the queries and output gradients of its group."""
    batch, heads, seqlen_q, head_dim = q.shape
    kv_heads, seqlen_k = k.shape[1], k.shape[2]
    group_bytes = 2 * (heads // kv_heads) * seqlen_q * head_dim * q.element_size()
    key_blocks = math.ceil(seqlen_k / _CTA_ROWS)
    return _block_grid(config, key_blocks, batch * kv_heads, group_bytes, 1)


def _launch_dkdv(
    config: BwdVariant,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    lse2: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    scale: float,
    packed: _Packed | None,
) -> None:
    """The dK/dV kernel on 4-D views (packed: (1, heads, total, head_dim), on the 2-D grid
    of the longest sequence's key blocks)."""
    from xpuruntime.kernels.attention import _hopper_bwd_kernels

    _, heads, seqlen_q, head_dim = q.shape
    kv_heads = k.shape[1]
    rows = config.dkdv_block_m
    grid: tuple[int, ...]
    if packed is not None:
        blocks = math.ceil(packed.max_k / _CTA_ROWS)
        grid, order = (blocks, packed.batch * kv_heads), (blocks, packed.batch * kv_heads, 1)
        seqlen_q, offsets = packed.max_q, (packed.cu_q, packed.cu_k, packed.cu_pad)
    else:
        grid, order = _key_block_grid(config, q, k)
        offsets = (delta, delta, delta)  # unused when dense
    args = (
        _descriptor(q, rows),
        _descriptor(k, _WG_ROWS),
        _descriptor(v, _WG_ROWS),
        _descriptor(grad_out, rows),
        _descriptor(dk, _WG_ROWS),
        _descriptor(dv, _WG_ROWS),
        _row_descriptor(lse2, rows),
        _row_descriptor(delta, rows),
        seqlen_q,
        kv_heads,
        heads // kv_heads,
        scale * _LOG2E,
        scale,
        *order,
        dk,
        dv,
        dk.stride(2),
        dk.stride(1),
        *offsets,
    )
    constants = {
        "HEAD_DIM": head_dim,
        "BLOCK_M": rows,
        "NUM_STAGES": config.dkdv_stages,
        "CAUSAL": causal,
        "LPT": config.lpt,
        "OVERLAP": config.dkdv_overlap,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.producer_regs,
        "VARLEN": packed is not None,
    }
    gluon_launch.launch(_hopper_bwd_kernels._xrt_attn_bwd_dkdv_hopper, grid, args, constants)


def _launch_fused(
    config: FusedVariant,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    dq_acc: torch.Tensor,
    lse2: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    scale: float,
) -> None:
    from xpuruntime.kernels.attention import _hopper_bwd_kernels

    _, heads, seqlen_q, head_dim = q.shape
    kv_heads = k.shape[1]
    rows = config.block_m
    grid, order = _key_block_grid(config, q, k)
    args = (
        _descriptor(q, rows),
        _descriptor(k, _WG_ROWS),
        _descriptor(v, _WG_ROWS),
        _descriptor(grad_out, rows),
        _descriptor(dk, _WG_ROWS),
        _descriptor(dv, _WG_ROWS),
        _row_descriptor(lse2, rows),
        _row_descriptor(delta, rows),
        dq_acc,
        _accumulator_descriptor(dq_acc),
        seqlen_q,
        lse2.shape[1],
        kv_heads,
        heads // kv_heads,
        scale * _LOG2E,
        scale,
        *order,
    )
    constants = {
        "HEAD_DIM": head_dim,
        "BLOCK_M": rows,
        "NUM_STAGES": config.stages,
        "CAUSAL": causal,
        "SPLIT_COLS": config.split_cols,
        "DQ_TMA": config.tma_dq,
        "LPT": config.lpt,
        "OVERLAP": config.overlap,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.producer_regs,
        "DQ_WRITER": config.dq_writer,
    }
    gluon_launch.launch(_hopper_bwd_kernels._xrt_attn_bwd_fused_hopper, grid, args, constants)


def _accumulator_descriptor(dq_acc: torch.Tensor) -> gluon_launch.Tma:
    """TMA descriptor of the float32 dQ accumulator seen as (batch x heads x seqlen_pad,
    head_dim), [64, 32] boxes: the fused kernel's reduce-add target."""
    return gluon_launch.Tma(dq_acc.view(-1, dq_acc.shape[2]), (64, 32), _float32_layout(128))


def _launch_convert(dq_acc: torch.Tensor, dq: torch.Tensor) -> None:
    from xpuruntime.kernels.attention import _hopper_bwd_kernels

    batch, heads, seqlen_q, head_dim = dq.shape
    block = 32  # 32 float32 a thread: no spills at head size 128
    args = (
        dq_acc, dq, dq.stride(0), dq.stride(1), dq.stride(2), seqlen_q, dq_acc.shape[1], heads,
    )  # fmt: skip
    gluon_launch.launch(
        _hopper_bwd_kernels._xrt_attn_bwd_dq_convert_hopper,
        (dq_acc.shape[1] // block, batch * heads), args, {"HEAD_DIM": head_dim, "BLOCK": block},
    )  # fmt: skip


def _launch_dq(
    config: BwdVariant,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    dq: torch.Tensor,
    lse2: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    scale: float,
    packed: _Packed | None,
) -> None:
    """The dQ kernel on 4-D views (packed: as :func:`_launch_dkdv`'s, on the 2-D grid of
    the longest sequence's query blocks)."""
    from xpuruntime.kernels.attention import _hopper_bwd_kernels

    batch, heads, seqlen_q, head_dim = q.shape
    kv_heads, seqlen_k = k.shape[1], k.shape[2]
    keys = config.dq_block_n
    grid: tuple[int, ...]
    if packed is not None:
        blocks = math.ceil(packed.max_q / _CTA_ROWS)
        grid, batch_heads, section = (blocks, packed.batch * heads), packed.batch * heads, 1
        seqlen_k, offsets = packed.max_k, (packed.cu_q, packed.cu_k, packed.cu_pad)
    else:
        # One CTA per 128 query rows of each (batch, head), streaming its key/value head's
        # keys and values (the kernel derives the block count from the padded buffers'
        # length).
        kv_bytes = 2 * seqlen_k * head_dim * k.element_size()
        query_blocks = math.ceil(seqlen_q / _CTA_ROWS)
        grid, (_, batch_heads, section) = _block_grid(
            config, query_blocks, batch * heads, kv_bytes, heads // kv_heads
        )
        offsets = (delta, delta, delta)  # unused when dense
    args = (
        _descriptor(q, _WG_ROWS),
        _descriptor(k, keys),
        _descriptor(v, keys),
        _descriptor(grad_out, _WG_ROWS),
        _descriptor(dq, _WG_ROWS),
        lse2,
        delta,
        lse2.shape[1],
        seqlen_k,
        heads,
        heads // kv_heads,
        scale * _LOG2E,
        scale,
        batch_heads,
        section,
        dq,
        dq.stride(2),
        dq.stride(1),
        *offsets,
    )
    constants = {
        "HEAD_DIM": head_dim,
        "BLOCK_N": keys,
        "NUM_STAGES": config.dq_stages,
        "CAUSAL": causal,
        "LPT": config.lpt,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.producer_regs,
        "VARLEN": packed is not None,
    }
    gluon_launch.launch(_hopper_bwd_kernels._xrt_attn_bwd_dq_hopper, grid, args, constants)
