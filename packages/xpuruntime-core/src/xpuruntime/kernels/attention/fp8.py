"""Host side of ``xrt_flash_fp8``: quantization to e4m3 with scales, and the fp8 forward.

Two ways in:

- float16/bfloat16 inputs (the policy precision ``fp8`` for inference): :func:`quantize`
  writes e4m3 copies of the key (per-block scales) and the value (per-channel scales,
  transposed, as fp8 wgmma needs) in two launches that read each once more; the query is
  quantized inside the attention kernel, one scale per row. :func:`forward` then runs on them; the
  output keeps the inputs' dtype.
- e4m3 inputs (``torch.float8_e4m3fn``) with descale factors, FlashAttention-3's convention,
  through :func:`from_fp8` at this module's level (the native dispatcher has no float8
  dtype yet, so ``xpuruntime.ops.attention`` does not take them): ``descale = (q_descale,
  k_descale, v_descale)``, each one float32 value or one per (batch, key/value head); the real
  tensor is ``x8 · descale``. The value is transposed once (a copy of one byte per element);
  the output is bfloat16.

Two kernels run it: on an H100/H200 (sm_90) the Gluon Hopper kernel
(:mod:`._hopper_kernels` with e4m3 tiles: warp-specialised, two consumer warpgroups, TMA), for
dense batches at head size 128 with at least one key (its eager calls ran faster than the
Triton kernel's from 128 to 16384 keys on an H200, full and causal), with the query quantized
beforehand (one scale per 64 rows); elsewhere the Triton kernel (:mod:`._fp8_kernels`), with
the reason the Gluon one passed in the detail on an H100/H200.

Imported only when the kernel runs (it imports torch and Triton).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from xpuruntime.kernels.attention import _fp8_kernels, gluon_launch
from xpuruntime.kernels.attention.hopper import _capability
from xpuruntime.kernels.attention.launch import (
    Layout,
    Varlen,
    _bhsd,
    _cdiv,
    _check_offsets,
    _Geometry,
    _geometry,
    _inner_contiguous,
    _interpreting,
    _launch,
    _length_bucket,
    _run_tiled,
    _strides,
)
from xpuruntime.kernels.attention.scale_sign import query_for_scale
from xpuruntime.kernels.attention.streams import on_device
from xpuruntime.kernels.attention.tiles import (
    FP8_SCALE_BLOCK,
    TileConfig,
    fp8_candidates,
    interpreter_tiles,
)
from xpuruntime.runtime.errors import InvalidArgumentError

if TYPE_CHECKING:
    from xpuruntime.kernels.attention.hopper import Fp8Scales, Relaunch

__all__ = [
    "HOPPER_DETAIL",
    "HOPPER_KEY_ORDER",
    "TRITON_DETAIL",
    "Quantized",
    "forward",
    "from_fp8",
    "quantize",
    "sequential_value",
]

_LOG2E = 1.4426950408889634
FP8 = torch.float8_e4m3fn
#: How the detail begins when the Gluon Hopper kernel ran, and when the Triton one did.
HOPPER_DETAIL = "gluon hopper fp8 e4m3 forward"
TRITON_DETAIL = "triton fp8 e4m3 forward"
#: Keys per group of the Gluon Hopper kernel's key order; the transposed value's rows are
#: padded to a multiple.
_KEY_GROUP = 32


def _hopper_position(key: Any) -> Any:
    """Where key ``key`` (an int, or an integer tensor) sits in the Gluon Hopper kernel's key
    order: within its group of 32, key 16 b4 + 8 b3 + 4 b2 + 2 b1 + b0 at 16 b4 + 8 b2 +
    4 b1 + 2 b3 + b0, its P operand's register order (``_hopper_kernels._p_operand``; the
    value quantization kernel's store, ``_xrt_attn_quant_vt``, spells it out again in Triton)."""
    return (key & ~31) | (key & 0x11) | ((key & 0x8) >> 2) | ((key & 0x6) << 1)


#: That order as a table: position k of a group holds key ``HOPPER_KEY_ORDER[k]``.
HOPPER_KEY_ORDER = tuple(sorted(range(_KEY_GROUP), key=_hopper_position))


@dataclass(frozen=True)
class Quantized:
    """e4m3 key and transposed value with their float32 scales (real = x8 · scale), and the
    query: e4m3 with ``q_scale``, or float16/bfloat16 with ``q_scale`` None (then the
    attention kernel quantizes the query itself, one scale per row).

    ``q``/``k`` keep the inputs' layout; ``vt`` is ``(batch, kv_heads, head_dim, seq)``, or
    ``(kv_heads, head_dim, total)`` packed. ``q_scale``/``k_scale`` are indexed
    (batch, head, row block of ``block``), ``v_scale`` (batch, kv head, channel); any of them
    may broadcast (zero strides). A ``v_scale`` broadcast over the channels
    (:func:`from_fp8`'s) is one scale a head to the Gluon Hopper kernel, which folds it into
    the rows' normalisation.
    """

    q: torch.Tensor
    k: torch.Tensor
    vt: torch.Tensor
    q_scale: torch.Tensor | None
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    out_dtype: torch.dtype
    #: Rows per key (and given query) scale; the attention tiles must divide it.
    block: int = FP8_SCALE_BLOCK
    #: How the scales were drawn, for the decision detail and the execution record.
    scaling: str = ""
    #: ``vt``'s key order: "sequential" (the Triton kernel's) or "hopper"
    #: (:data:`HOPPER_KEY_ORDER`, the Gluon Hopper kernel's, chosen where it will run).
    key_order: Literal["sequential", "hopper"] = "sequential"

    def __post_init__(self) -> None:
        if self.key_order not in ("sequential", "hopper"):
            raise InvalidArgumentError(
                f"attention: key_order must be 'sequential' or 'hopper', not {self.key_order!r}"
            )


@functools.cache
def _fix_interpreter_fp8_casts() -> None:
    """Triton's CPU interpreter (3.6) rounds float32 to float8 e4m3 without carrying a
    rounded-up mantissa into the exponent (127.9 becomes 64, not 128); convert float8 through
    PyTorch's exact round-to-nearest-even instead, as the GPU's ``cvt.rn`` does, so the
    kernels give the GPU's results in the interpreter (tests run there)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        source, target = src.dtype.scalar, dst_type.scalar
        if target == tl.float8e4nv and source in (tl.float32, tl.float16):
            data = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
            bits = data.to(FP8).view(torch.uint8).numpy().reshape(src.data.shape)
            return interpreter.TensorHandle(bits, target)
        return original(self, src, dst_type, rounding_mode)

    interpreter.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp


def _interpreted() -> bool:
    if not _interpreting():
        return False
    _fix_interpreter_fp8_casts()
    return True


def _padded_keys(seq: int) -> int:
    return -(-seq // _KEY_GROUP) * _KEY_GROUP


def _transposed_value(shape: tuple[int, ...], device: torch.device, hopper: bool) -> torch.Tensor:
    """An e4m3 buffer for the transposed value, ``shape`` ending in (head_dim, seq): its rows
    padded in memory (not in the view) to a multiple of 32 keys, so they start 16-byte
    aligned for TMA and hold whole groups of the Hopper key order; with ``hopper`` the last
    group's padding is zero (its P weights are 0 there, and 0 · garbage may be NaN)."""
    seq = shape[-1]
    padded = torch.empty((*shape[:-1], _padded_keys(seq)), dtype=FP8, device=device)
    if hopper and seq % _KEY_GROUP:
        padded[..., seq // _KEY_GROUP * _KEY_GROUP :].view(torch.uint8).zero_()
    return padded[..., :seq]


def _whole_groups(vt: torch.Tensor) -> torch.Tensor:
    """``vt`` with its padding in view: whole groups of 32 keys."""
    return vt.as_strided((*vt.shape[:-1], _padded_keys(vt.shape[-1])), vt.stride())


def _positions(device: torch.device, seq: int) -> torch.Tensor:
    """Where each key 0..seq-1 sits in the Hopper key order (computed on the device)."""
    positions: torch.Tensor = _hopper_position(torch.arange(seq, device=device))
    return positions


def sequential_value(qz: Quantized) -> torch.Tensor:
    """``qz.vt`` in sequential key order (a copy where it is in the Hopper order)."""
    if qz.key_order == "sequential":
        return qz.vt
    seq = qz.vt.shape[-1]
    data = _whole_groups(qz.vt).view(torch.uint8)
    return data.index_select(-1, _positions(qz.vt.device, seq)).view(FP8)


def _vt_strides(vt: torch.Tensor, packed: bool) -> tuple[int, int, int]:
    if packed:
        return 0, vt.stride(0), vt.stride(1)
    return vt.stride(0), vt.stride(1), vt.stride(2)


def _quantize_key(
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Layout,
    cu_seqlens: torch.Tensor | None,
    g: _Geometry,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e4m3 key, its per-block scales, the value's per-channel scales): one launch that
    reads the key and the value once each."""
    k8 = torch.empty(k.shape, dtype=FP8, device=k.device)
    blocks = max(_cdiv(g.seqlen_k, block), 1)
    # Blocks past a shorter packed sequence's end keep scale 1 (never read).
    k_scale = torch.ones((g.batch, g.kv_heads, blocks), dtype=torch.float32, device=k.device)
    # Per-block channel maxima of the value (blocks past a shorter sequence's end stay 0).
    v_max = torch.zeros(
        (g.batch, g.kv_heads, blocks, g.head_dim), dtype=torch.float32, device=k.device
    )
    sk, s8, sv = _strides(k, layout), _strides(k8, layout), _strides(v, layout)
    if g.batch * g.kv_heads and g.seqlen_k:
        _launch_quant(
            _fp8_kernels._xrt_attn_quant_rows, (blocks, g.batch * g.kv_heads), block,
            g.head_dim,
            (k, k8, k_scale, v, v_max, k if cu_seqlens is None else cu_seqlens,
             sk.batch, sk.seq, sk.head, s8.batch, s8.seq, s8.head,
             k_scale.stride(0), k_scale.stride(1), sv.batch, sv.seq, sv.head,
             v_max.stride(0), v_max.stride(1), v_max.stride(2), g.seqlen_k, g.kv_heads),
            {"HEAD_DIM": g.head_dim, "BLOCK": block, "VARLEN": cu_seqlens is not None,
             "VALUE_MAX": True},
        )  # fmt: skip
    # A channel that is zero everywhere keeps scale 1.
    channel_max = v_max.amax(dim=2)
    v_scale = torch.where(channel_max > 0, channel_max / torch.finfo(FP8).max, 1.0)
    return k8, k_scale, v_scale


def _launch_quant(
    kernel: Any,
    grid: tuple[int, int],
    block: int,
    head_dim: int,
    args: tuple[Any, ...],
    constants: dict[str, Any],
) -> gluon_launch.Kept | None:
    """Launch a quantization kernel (one program per block of ``block`` rows; more warps for
    larger tiles keep registers bounded) on the current device and stream. On a GPU its
    compiled kernel is kept and launched again without the JIT's per-call work
    (:mod:`.gluon_launch`): on an H200 that work took longer than the kernels themselves at
    4096 keys (docs/attention.md). Returns the kept kernel (None under the interpreter, or
    for a kernel with Triton pre-run hooks, which only the JIT runs)."""
    warps = 8 if block * head_dim > 8192 else 4
    if _interpreting():
        device = next(a for a in args if isinstance(a, torch.Tensor)).device
        _launch(kernel, grid, TileConfig(block, 0, warps, 1), device, *args, **constants)
        return None
    return gluon_launch.launch(kernel, grid, args, constants, num_warps=warps, num_stages=1)


def quantize(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
    block: int = FP8_SCALE_BLOCK,
    key_order: Literal["auto", "sequential"] = "auto",
) -> Quantized:
    """e4m3 copies of float16/bfloat16 ``k`` (per-block scales of ``block`` rows of one head)
    and ``v`` (per-channel scales, transposed); ``q`` stays as it is, for the attention kernel
    to quantize per tile. ``key_order``: the value's, "auto" for the kernel that will take
    the call (the Gluon one's on an H100/H200), "sequential" for the Triton kernel's."""
    if key_order not in ("auto", "sequential"):
        raise InvalidArgumentError(
            f"attention: quantize's key_order is 'auto' or 'sequential', not {key_order!r}"
        )
    interpreted = _interpreted()  # applies the interpreter's float8 fix before a CPU run
    q, k, v = (_inner_contiguous(x) for x in (q, k, v))
    g = _geometry(q, k, layout, varlen)
    cu_k = None if varlen is None else varlen.cu_seqlens_k
    # The value in the key order of the kernel that will run it.
    hopper = (
        key_order == "auto" and not interpreted and not _hopper_reason(q.device, g, varlen, block)
    )
    with on_device(q.device, stream):
        k8, k_scale, v_scale = _quantize_key(k, v, layout, cu_k, g, block)
        if layout == "thd":
            vt = _transposed_value((g.kv_heads, g.head_dim, v.shape[0]), v.device, hopper)
        else:
            shape = (g.batch, g.kv_heads, g.head_dim, g.seqlen_k)
            vt = _transposed_value(shape, v.device, hopper)
        sv = _strides(v, layout)
        if g.seqlen_k > 0 and g.batch * g.kv_heads > 0:
            _launch_quant(
                _fp8_kernels._xrt_attn_quant_vt,
                (_cdiv(g.seqlen_k, block), g.batch * g.kv_heads), block, g.head_dim,
                (v, vt, v_scale, v if cu_k is None else cu_k, sv.batch, sv.seq, sv.head,
                 *_vt_strides(vt, layout == "thd"), v_scale.stride(0), v_scale.stride(1),
                 g.seqlen_k, g.kv_heads),
                {"HEAD_DIM": g.head_dim, "BLOCK": block, "VARLEN": varlen is not None,
                 "HOPPER_ORDER": hopper},
            )  # fmt: skip
    scaling = f"scales: query per row, key per {block} rows, value per channel"
    order: Literal["sequential", "hopper"] = "hopper" if hopper else "sequential"
    return Quantized(q, k8, vt, None, k_scale, v_scale, q.dtype, block, scaling, order)


def _descale(
    name: str, d: torch.Tensor, batch: int, kv_heads: int, device: torch.device
) -> torch.Tensor:
    """A descale factor as a (batch, kv_heads) float32 view (broadcast where it is one value)."""
    if not isinstance(d, torch.Tensor) or d.dtype != torch.float32 or d.device != device:
        raise InvalidArgumentError(
            f"attention: {name} must be a float32 tensor on {device} (one value, or one per "
            f"(batch, key/value head)), got {type(d).__name__}"
            + (f" {d.dtype} on {d.device}" if isinstance(d, torch.Tensor) else "")
        )
    if d.numel() == 1:
        return d.reshape(1, 1).expand(batch, kv_heads)
    if tuple(d.shape) != (batch, kv_heads):
        raise InvalidArgumentError(
            f"attention: {name} must hold one value or one per (batch, key/value head) "
            f"= {(batch, kv_heads)}, got shape {tuple(d.shape)}"
        )
    return d


def from_fp8(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    descale: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    layout: Layout,
    varlen: Varlen | None = None,
) -> Quantized:
    """e4m3 inputs with FlashAttention-3-style descale factors, as :class:`Quantized` (the
    value transposed; the key's and value's scales written out once here in the shape the
    kernels read, so that no call copies them: the value's one a (batch, kv head), broadcast
    over the channels, which the Gluon Hopper kernel folds into the rows' normalisation).
    The factors are taken as non-negative (amax / 448, as FlashAttention-3's are; they are
    not read back to check): a sign for the scores goes in :func:`forward`'s ``scale``."""
    if not (q.dtype == k.dtype == v.dtype == FP8):
        raise InvalidArgumentError(
            f"attention: descale factors go with float8_e4m3fn inputs, got {q.dtype}"
        )
    q, k, v = (_inner_contiguous(x) for x in (q, k, v))
    g = _geometry(q, k, layout, varlen)
    batch = g.batch
    qd, kd, vd = (
        _descale(name, d, batch, g.kv_heads, q.device)
        for name, d in zip(("q_descale", "k_descale", "v_descale"), descale, strict=True)
    )
    group = g.heads // g.kv_heads
    # Query head h reads its key/value head's factor; one factor for every row block.
    q_scale = qd.repeat_interleave(group, 1)[:, :, None]
    k_blocks = max(_cdiv(g.seqlen_k, FP8_SCALE_BLOCK), 1)
    k_scale = kd[:, :, None].expand(-1, -1, k_blocks).contiguous()
    # One value scale a head, broadcast over the channels (the Gluon kernel reads the head's
    # one: _hopper_scales).
    v_scale = vd.contiguous()[:, :, None].expand(-1, -1, g.head_dim)
    source = (
        v.permute(1, 2, 0)
        if layout == "thd"
        else (v.permute(0, 2, 3, 1) if layout == "bshd" else v.transpose(2, 3))
    )
    hopper = not _interpreted() and not _hopper_reason(q.device, g, varlen, FP8_SCALE_BLOCK)
    vt = _transposed_value(tuple(source.shape), v.device, hopper)
    if hopper:
        positions = _positions(v.device, source.shape[-1])
        _whole_groups(vt).view(torch.uint8).index_copy_(-1, positions, source.view(torch.uint8))
    else:
        vt.copy_(source)
    scaling = "e4m3 inputs, descale per " + (
        "tensor" if all(d.numel() == 1 for d in descale) else "(batch, key/value head)"
    )
    return Quantized(
        q, k, vt, q_scale, k_scale, v_scale, torch.bfloat16, scaling=scaling,
        key_order="hopper" if hopper else "sequential",
    )  # fmt: skip


def _hopper_reason(device: torch.device, g: _Geometry, varlen: Varlen | None, block: int) -> str:
    """'' when the Gluon Hopper fp8 kernel can take a call of this geometry on ``device``,
    else why not (the detail gives it on an H100/H200 only: elsewhere the Triton kernel is
    the only one)."""
    from xpuruntime.kernels.attention import hopper, support

    if _capability(device) != (9, 0):
        return "not an sm_90 GPU"
    if varlen is not None:
        return "it takes dense batches; packed sequences (cu_seqlens) run the Triton kernel"
    if g.head_dim not in hopper.FP8_HEAD_DIMS:
        sizes = ", ".join(map(str, hopper.FP8_HEAD_DIMS))
        return (
            f"it takes head size {sizes}, not {g.head_dim} (elsewhere the Triton kernel "
            "measured as fast or faster)"
        )
    if g.seqlen_k == 0:  # (a TMA descriptor has no empty dimension)
        return "no key: the Triton kernel writes the zeros and -inf log-sum-exp"
    block_n = hopper.fp8_variant(g.head_dim).block_n  # a bad variant name raises here
    if block % block_n:
        return f"key scales per {block} rows do not cover its key blocks of {block_n}"
    return support._missing_gluon()


def _hopper_call_reason(
    qz: Quantized, g: _Geometry, layout: Layout, varlen: Varlen | None, tiles: TileConfig | None
) -> str:
    """'' when the Gluon Hopper fp8 kernel takes this call, else why not."""
    from xpuruntime.kernels.attention import hopper

    if tiles is not None:
        return "tiles were given, which are the Triton kernel's"
    reason = _hopper_reason(qz.q.device, g, varlen, qz.block)
    if reason:
        return reason
    if qz.key_order != "hopper":
        return "the value was quantized in the Triton kernel's key order"
    if qz.q_scale is not None and qz.q_scale.shape[2] != 1:
        return "its e4m3 query takes one scale per (batch, head), not per row block"
    views = (_bhsd(layout, qz.q), _bhsd(layout, qz.k))
    if qz.q.dtype == FP8 and not all(hopper.tma_addressable(x) for x in views):
        return "an input's strides are not 16-byte aligned (TMA cannot address it)"
    return ""


def _hopper_query(qz: Quantized, g: _Geometry) -> tuple[torch.Tensor, torch.Tensor]:
    """The Gluon Hopper kernel's e4m3 query and its scales: for a 16-bit query new buffers
    (one scale per 64 rows), which :func:`_quantize_query` fills; for an e4m3 one the query
    and its scales (one per (batch, head)) as they are."""
    from xpuruntime.kernels.attention import hopper

    if qz.q_scale is not None:
        # One scale per (batch, head) (:func:`_hopper_call_reason`): the kernel clamps its
        # row block's index to the scales' last, so they go as they are, no copy per call.
        return qz.q, qz.q_scale.contiguous()
    q_blocks = _cdiv(g.seqlen_q, hopper.FP8_QUERY_BLOCK)
    q8 = torch.empty(qz.q.shape, dtype=FP8, device=qz.q.device)
    return q8, torch.empty((g.batch, g.heads, q_blocks), dtype=torch.float32, device=q8.device)


def _query_quant_launch(
    qz: Quantized, g: _Geometry, layout: Layout, q8: torch.Tensor, q_scale: torch.Tensor
) -> tuple[tuple[int, int], tuple[Any, ...]]:
    """The grid and runtime arguments of the query's quantization into ``q8`` and ``q_scale``
    (one scale per 64 rows)."""
    sq, s8 = _strides(qz.q, layout), _strides(q8, layout)
    grid = (q_scale.shape[2], g.batch * g.heads)
    args = (
        qz.q, q8, q_scale, qz.q, q_scale, qz.q,
        sq.batch, sq.seq, sq.head, s8.batch, s8.seq, s8.head,
        q_scale.stride(0), q_scale.stride(1), 0, 0, 0, 0, 0, 0, g.seqlen_q, g.heads,
    )  # fmt: skip
    return grid, args


def _quantize_query(
    qz: Quantized, g: _Geometry, layout: Layout, q8: torch.Tensor, q_scale: torch.Tensor
) -> gluon_launch.Replay | None:
    """Quantize the 16-bit query into ``q8`` and ``q_scale`` (one scale per 64 rows); returns
    the launch to repeat, its sources the 16-bit query, ``q8`` and ``q_scale`` (None where
    no kernel is kept: :func:`_launch_quant`)."""
    from xpuruntime.kernels.attention import hopper

    grid, args = _query_quant_launch(qz, g, layout, q8, q_scale)
    constants = {
        "HEAD_DIM": g.head_dim, "BLOCK": hopper.FP8_QUERY_BLOCK, "VARLEN": False,
        "VALUE_MAX": False,
    }  # fmt: skip
    kernel = _fp8_kernels._xrt_attn_quant_rows
    kept = _launch_quant(kernel, grid, hopper.FP8_QUERY_BLOCK, g.head_dim, args, constants)
    return None if kept is None else kept.replay(grid, args, (qz.q, q8, q_scale))


def _hopper_scales(qz: Quantized, g: _Geometry, q_scale: torch.Tensor) -> Fp8Scales:
    """The Gluon Hopper kernel's scales (:class:`.hopper.Fp8Scales`), each as a contiguous
    (batch, heads, blocks) tensor: broadcast ones copied, which :func:`quantize`'s and
    :func:`from_fp8`'s never are; the value's as (batch, kv heads) where it broadcasts over
    the channels (:attr:`.hopper.Fp8Scales.v_per_head`)."""
    from xpuruntime.kernels.attention import hopper

    k_blocks = _cdiv(g.seqlen_k, qz.block)
    if qz.v_scale.stride(2) == 0:  # one a head: Fp8Scales.v_per_head
        v = qz.v_scale[:, :, 0].expand(g.batch, g.kv_heads).contiguous()
    else:
        v = qz.v_scale.expand(g.batch, g.kv_heads, g.head_dim).contiguous()
    return hopper.Fp8Scales(
        q=q_scale,
        k=qz.k_scale.expand(g.batch, g.kv_heads, k_blocks).contiguous(),
        v=v,
        k_block=qz.block,
    )


@dataclass(frozen=True, slots=True)
class _Repeat:
    """What a dense call through the Gluon Hopper kernel launched, for the next call with the
    same :func:`_repeat_key`: it launches the kept kernels again (the query's quantization,
    ``quant``, None for an e4m3 query, and ``attention``), skipping the geometry, the
    checks, the kernel's choice and the launchers' cache keys (most of the host time of a
    call at 4096 keys on an H200, docs/attention.md)."""

    layout: Layout
    g: _Geometry
    quant: gluon_launch.Replay | None
    attention: Relaunch
    detail: str

    def run(self, qz: Quantized) -> tuple[torch.Tensor, torch.Tensor, str] | None:
        """The repeated call's result; None (neither kept kernel launched) where a new
        allocation is not 16-byte aligned as the kept kernels take it (an allocator other
        than PyTorch's): the caller then decides afresh."""
        g, layout = self.g, self.layout
        out = torch.empty(qz.q.shape, dtype=qz.out_dtype, device=qz.q.device)
        lse = torch.empty((g.batch, g.heads, g.seqlen_q), dtype=torch.float32, device=out.device)
        q8, q_scale = _hopper_query(qz, g)
        scales = _hopper_scales(qz, g, q_scale)
        fresh = (out, lse, q8, scales.q, scales.k, scales.v)
        if any(x.data_ptr() % 16 for x in fresh):
            return None
        if self.quant is not None:
            self.quant.launch(
                (qz.q, q8, q_scale), lambda: _query_quant_launch(qz, g, layout, q8, q_scale)[1]
            )
        self.attention.launch(
            _bhsd(layout, q8), _bhsd(layout, qz.k), _whole_groups(qz.vt), _bhsd(layout, out),
            lse, scales,
        )  # fmt: skip
        return out, lse, self.detail


#: Dense Hopper calls' launches by :func:`_repeat_key`.
_REPEATS: gluon_launch.Repeats[_Repeat] = gluon_launch.Repeats()


def _repeat_key(
    qz: Quantized,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None,
    stream: int | None,
    tiles: TileConfig | None,
) -> tuple[Any, ...] | None:
    """The key of a call in :data:`_REPEATS`, or None where a call cannot repeat an earlier
    one: packed sequences, tiles or a stream given, a scale other than a float or None, an
    input not 16-byte aligned, a device other than the current one, a kernel with Triton
    pre-run hooks. It holds everything the checks, the choice of kernel and variant and the
    launches' arguments and specialisation depend on (each tensor's shape, strides and
    dtype, the device, the scales' block, the value's key order, the output dtype, the
    scaling's description, the mask, the scale, the layout, the variant's environment
    variable, Triton's debug and instrumentation settings), the
    addresses only through their alignment."""
    from xpuruntime.kernels.attention import _hopper_kernels, hopper

    if varlen is not None or tiles is not None or stream is not None:
        return None
    if not (scale is None or type(scale) is float) or _capability(qz.q.device) != (9, 0):
        return None
    tensors = tuple(
        x for x in (qz.q, qz.k, qz.vt, qz.q_scale, qz.k_scale, qz.v_scale) if x is not None
    )
    pointers = 0
    for x in tensors:
        pointers |= x.data_ptr()
    if pointers % 16 or qz.q.device.index != torch.cuda.current_device():
        return None
    settings = gluon_launch.relaunch_key(_hopper_kernels._xrt_attn_fwd_hopper)
    if settings is None or gluon_launch.relaunch_key(_fp8_kernels._xrt_attn_quant_rows) is None:
        return None
    return (
        tuple([(x.shape, x.stride(), x.dtype) for x in tensors]), qz.q_scale is None,
        qz.q.device, qz.block, qz.key_order, qz.out_dtype, qz.scaling, causal, scale, layout,
        os.environ.get(hopper.FP8_VARIANT_ENV), settings,
    )  # fmt: skip


def _hopper_forward(
    qz: Quantized,
    g: _Geometry,
    layout: Layout,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
) -> tuple[str, _Repeat | None]:
    """Run the Gluon Hopper fp8 kernel (a float16/bfloat16 query quantized first, one
    scale per 64 rows); returns the detail and what a repeated call launches again (None
    where it cannot: a kernel not kept, or the ``_l`` twin run during a graph capture)."""
    from xpuruntime.kernels.attention import hopper

    q8, q_scale = _hopper_query(qz, g)
    quantized_here = qz.q_scale is None
    quant = _quantize_query(qz, g, layout, q8, q_scale) if quantized_here else None
    config, twin, relaunch = hopper.hopper_fp8_forward(
        _bhsd(layout, q8), _bhsd(layout, qz.k), _whole_groups(qz.vt),
        _hopper_scales(qz, g, q_scale), causal=causal, scale=scale, out=_bhsd(layout, out),
        lse=lse,
    )  # fmt: skip
    scaling = qz.scaling
    if quantized_here:
        scaling = scaling.replace("query per row", "query per 64 rows")
    detail = f"{HOPPER_DETAIL} (warp-specialised, {config.name}{twin}) ({scaling})"
    if relaunch is None or (quantized_here and quant is None):
        return detail, None
    return detail, _Repeat(layout, g, quant, relaunch, detail)


def _scale_strides(x: torch.Tensor) -> tuple[int, int, int]:
    # A scale with one row block is read at index 0 only: stride 0 reads it for every block.
    return x.stride(0), x.stride(1), x.stride(2) if x.shape[2] > 1 else 0


def forward(
    qz: Quantized,
    *,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
    tiles: TileConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(output, log-sum-exp, detail) of attention on quantized inputs; as
    :func:`launch.forward`, the output in ``qz.out_dtype``."""
    interpreted = _interpreted()  # applies the interpreter's float8 fix before a CPU run
    q, scale = query_for_scale(qz.q, scale, stream)
    if q is not qz.q:  # a negative scale: its magnitude on the negated query
        qz = replace(qz, q=q)
    repeat_key = (
        None if interpreted else _repeat_key(qz, causal, scale, layout, varlen, stream, tiles)
    )
    if repeat_key is not None:
        repeat = _REPEATS.get(repeat_key)
        repeated = None if repeat is None else repeat.run(qz)
        if repeated is not None:
            return repeated
    q, k, vt = qz.q, qz.k, qz.vt
    g: _Geometry = _geometry(q, k, layout, varlen)
    scale = 1.0 / math.sqrt(g.head_dim) if scale is None else float(scale)
    out = torch.empty(q.shape, dtype=qz.out_dtype, device=q.device)
    if layout == "thd":
        lse = torch.empty((g.heads, q.shape[0]), dtype=torch.float32, device=q.device)
        lse_strides = (0, lse.stride(0))
    else:
        lse = torch.empty((g.batch, g.heads, g.seqlen_q), dtype=torch.float32, device=q.device)
        lse_strides = (lse.stride(0), lse.stride(1))
    sq, sk, so = (_strides(x, layout) for x in (q, k, out))
    _check_offsets("query", q, sq, g.seqlen_q)
    _check_offsets("key", k, sk, g.seqlen_k)
    if g.batch * g.heads == 0 or g.seqlen_q == 0:
        return out, lse.fill_(float("-inf")), "empty input"
    hopper_reason = ""
    if not interpreted and _capability(q.device) == (9, 0):
        hopper_reason = _hopper_call_reason(qz, g, layout, varlen, tiles)
        if not hopper_reason:
            with on_device(q.device, stream):
                detail, launched = _hopper_forward(qz, g, layout, out, lse, causal, scale)
            if repeat_key is not None and launched is not None:
                _REPEATS.keep(repeat_key, launched)
            return out, lse, detail
    cu_q = varlen.cu_seqlens_q if varlen else q  # unused pointer when dense
    cu_k = varlen.cu_seqlens_k if varlen else q
    vs = qz.v_scale

    def launch(t: TileConfig) -> None:
        grid = (_cdiv(g.seqlen_q, t.block_m), g.batch * g.heads)
        _launch(
            _fp8_kernels._xrt_attn_fwd_fp8, grid, t, q.device,
            q, k, vt, q if qz.q_scale is None else qz.q_scale, qz.k_scale, vs, out, lse,
            cu_q, cu_k,
            sq.batch, sq.seq, sq.head, sk.batch, sk.seq, sk.head,
            *_vt_strides(vt, layout == "thd"), so.batch, so.seq, so.head, *lse_strides,
            *(_scale_strides(qz.q_scale) if qz.q_scale is not None else (0, 0, 0)),
            *_scale_strides(qz.k_scale),
            vs.stride(0), vs.stride(1), vs.stride(2),
            g.seqlen_q, g.seqlen_k, g.heads, g.heads // g.kv_heads, scale * _LOG2E,
            HEAD_DIM=g.head_dim, BLOCK_M=t.block_m, BLOCK_N=t.block_n,
            SCALE_BLOCK=qz.block, CAUSAL=causal, VARLEN=varlen is not None,
            QUANT_Q=qz.q_scale is None,
        )  # fmt: skip

    with on_device(q.device, stream):
        vt = sequential_value(qz)  # on the stream that wrote it
        if tiles is not None:
            launch(tiles)
            detail = tiles.describe() + " (given)"
        else:
            options = tuple(
                t
                for t in (
                    interpreter_tiles("forward")
                    if _interpreted()
                    else fp8_candidates(g.head_dim, _capability(q.device))
                )
                if qz.block % t.block_m == 0 and qz.block % t.block_n == 0
            )
            if not options:
                raise InvalidArgumentError(
                    f"xrt_flash_fp8: key scales per {qz.block} rows fit none of this GPU's "
                    f"tiles (they must divide it); quantize with block={FP8_SCALE_BLOCK}"
                )
            key = (
                "forward_fp8",
                _capability(q.device),
                g.head_dim,
                causal,
                qz.out_dtype,
                qz.block,
                varlen is not None,
                _length_bucket(g.seqlen_q, g.seqlen_k),
            )
            detail = _run_tiled(key, options, launch, q.device)
    passed_over = (
        f"; the Gluon Hopper fp8 kernel passed over: {hopper_reason}" if hopper_reason else ""
    )
    return out, lse, f"{TRITON_DETAIL} ({qz.scaling}) {detail}{passed_over}"
