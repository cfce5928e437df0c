"""Host side of ``xrt_flash``: shapes and strides, outputs, grids, tile choice, launches.

Imported only when an attention kernel runs (it imports torch and Triton). Inputs are torch
tensors whose head dimension is contiguous; any batch/sequence/head strides are used as they
are (no copies). Outputs are allocated contiguous in the inputs' layout.

Tile choice: the first candidate of :mod:`.tiles` that compiles is used (a candidate that does
not fit this GPU's registers or shared memory is skipped, and the decision detail says so).
With tuning on (``XPURUNTIME_ATTENTION_TUNE=1`` or :func:`set_tuning`), every candidate is
timed once per (pass, GPU, head size, causal, dtype, varlen, sequence-length bucket: the
next power of two of the longer sequence) and the fastest kept, since the best tiles differ
between short and long sequences; tuning never runs during CUDA-graph capture. Compiled kernels land in Triton's content-addressed
cache (``TRITON_CACHE_DIR``, default ``~/.triton/cache``): a process-wide Triton setting that
xpuruntime leaves to the user, since moving it would move every other Triton user's cache.
"""

from __future__ import annotations

import contextvars
import functools
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import triton

from xpuruntime.kernels.attention import _kernels, hopper, hopper_bwd
from xpuruntime.kernels.attention.hopper import _capability
from xpuruntime.kernels.attention.scale_sign import query_for_scale
from xpuruntime.kernels.attention.streams import on_device
from xpuruntime.kernels.attention.tiles import Pass, TileConfig, candidates, interpreter_tiles
from xpuruntime.runtime.errors import UnsupportedOperationError, XpuRuntimeError

__all__ = [
    "HOPPER_BACKWARD",
    "Layout",
    "Varlen",
    "backward",
    "forward",
    "hopper_backward",
    "hopper_backward_plan",
    "hopper_forward",
    "set_tuning",
]

Layout = Literal["bshd", "bhsd", "thd"]
_LOG2E = 1.4426950408889634
_INT32_MAX = 2**31 - 1
#: How :func:`hopper_backward`'s detail begins when the Gluon Hopper backward runs; the
#: parenthesis after it says which of its paths runs and why (:func:`hopper_backward_plan`).
HOPPER_BACKWARD = "backward: gluon hopper backward"


@dataclass(frozen=True)
class Varlen:
    """Packed variable-length sequences: batch ``i`` is rows ``cu[i]:cu[i+1]`` of (T, H, D)."""

    cu_seqlens_q: torch.Tensor  # int32, (batch + 1,), on the inputs' device
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int


@dataclass(frozen=True)
class _Strides:
    batch: int
    seq: int
    head: int


def _strides(x: torch.Tensor, layout: Layout) -> _Strides:
    if layout == "bshd":
        return _Strides(x.stride(0), x.stride(1), x.stride(2))
    if layout == "bhsd":
        return _Strides(x.stride(0), x.stride(2), x.stride(1))
    return _Strides(0, x.stride(0), x.stride(1))  # thd: sequences start at cu_seqlens rows


@dataclass(frozen=True)
class _Geometry:
    batch: int
    seqlen_q: int  # the longest query sequence (grid size)
    seqlen_k: int
    heads: int
    kv_heads: int
    head_dim: int


def _geometry(q: torch.Tensor, k: torch.Tensor, layout: Layout, varlen: Varlen | None) -> _Geometry:
    if layout == "thd":
        assert varlen is not None
        return _Geometry(
            batch=varlen.cu_seqlens_q.numel() - 1,
            seqlen_q=varlen.max_seqlen_q,
            seqlen_k=varlen.max_seqlen_k,
            heads=q.shape[1],
            kv_heads=k.shape[1],
            head_dim=q.shape[2],
        )
    seq_dim, head_dim = (1, 2) if layout == "bshd" else (2, 1)
    return _Geometry(
        batch=q.shape[0],
        seqlen_q=q.shape[seq_dim],
        seqlen_k=k.shape[seq_dim],
        heads=q.shape[head_dim],
        kv_heads=k.shape[head_dim],
        head_dim=q.shape[-1],
    )


def _bhsd(layout: Layout, x: torch.Tensor) -> torch.Tensor:
    """The (batch, heads, seq, head_dim) view the Gluon kernels take of a dense tensor (packed
    (total, heads, dim) rows as they are)."""
    return x.transpose(1, 2) if layout == "bshd" else x


def _inner_contiguous(x: torch.Tensor) -> torch.Tensor:
    # The kernels address the head dimension with unit stride; other strides are free.
    return x if x.stride(-1) == 1 else x.contiguous()


def _check_offsets(name: str, x: torch.Tensor, s: _Strides, seqlen: int) -> None:
    # Offsets inside one sequence are 32-bit in the kernels (sequence starts are 64-bit).
    if (seqlen + 256) * s.seq >= _INT32_MAX:
        raise UnsupportedOperationError(
            f"xrt_flash: {name} has sequence stride {s.seq} and {seqlen} positions, past the "
            "kernels' 32-bit in-sequence offsets; use a (batch, heads, seq, dim) layout or "
            "shorter sequences"
        )


def _tma_ready(tensors: list[torch.Tensor], layout: Layout) -> bool:
    """Whether tensor descriptors can address these tensors (16-byte aligned bases and
    strides, as the tensor memory accelerator requires)."""
    for x in tensors:
        if x.data_ptr() % 16:
            return False
        s = _strides(x, layout)
        if any((stride * x.element_size()) % 16 for stride in (s.batch, s.seq, s.head)):
            return False
    return True


def _interpreting() -> bool:
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return False
    _fix_interpreter_bfloat16_dot()
    return True


@functools.cache
def _fix_interpreter_bfloat16_dot() -> None:
    """Triton's CPU interpreter (3.6) keeps bfloat16 as raw uint16 bits and multiplies those
    bits in ``tl.dot``; widen bfloat16 operands to float32 first, as the GPU's tensor cores
    do, so the kernels give correct bfloat16 results in the interpreter (tests run there)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def widen(handle: Any) -> Any:
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        data = interpreter._convert_float(handle.data, tl.bfloat16, tl.float32, None)
        return interpreter.TensorHandle(
            data.view(np.float32).reshape(handle.data.shape), tl.float32
        )

    def create_dot(self: Any, a: Any, b: Any, d: Any, *args: Any) -> Any:
        return original(self, widen(a), widen(b), d, *args)

    interpreter.InterpreterBuilder.create_dot = create_dot


# ---------------------------------------------------------------------------------------
# Tile choice: fixed (first candidate that compiles) or tuned (fastest candidate).

_tuning = os.environ.get("XPURUNTIME_ATTENTION_TUNE", "0") == "1"
_chosen: dict[tuple[Any, ...], tuple[TileConfig, str]] = {}
_chosen_lock = threading.Lock()


def set_tuning(enabled: bool) -> None:
    """Time every tile candidate on first use of a case and keep the fastest (off: the first
    candidate that compiles). Already chosen cases keep their choice."""
    global _tuning
    _tuning = enabled


def _candidates(pass_: Pass, head_dim: int, device: torch.device) -> tuple[TileConfig, ...]:
    if _interpreting():
        return interpreter_tiles(pass_)
    return candidates(pass_, head_dim, _capability(device))


def _time_ms(launch: Callable[[], None]) -> float:
    launch()  # compile and warm up
    times = triton.testing.do_bench(launch, warmup=5, rep=20, return_mode="median")
    return float(times)


def _length_bucket(seqlen_q: int, seqlen_k: int) -> int:
    """The tuning key's sequence-length bucket: the next power of two of the longer one."""
    return 1 << (max(seqlen_q, seqlen_k, 1) - 1).bit_length()


def _run_tiled(
    key: tuple[Any, ...],
    options: tuple[TileConfig, ...],
    launch: Callable[[TileConfig], None],
    device: torch.device,
) -> str:
    """Launch with the case's chosen tiles (choosing them on first use); returns the detail."""
    found = _chosen.get(key)
    if found is not None:
        launch(found[0])
        return found[1]
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    with _chosen_lock:
        found = _chosen.get(key)
        if found is not None:
            launch(found[0])
            return found[1]
        failures: list[str] = []
        timings: list[tuple[float, TileConfig]] = []
        for tiles in options:
            try:
                if _tuning and not capturing and device.type == "cuda" and len(options) > 1:
                    timings.append((_time_ms(lambda t=tiles: launch(t)), tiles))  # type: ignore[misc]
                    continue
                launch(tiles)
            except Exception as error:  # a candidate this GPU cannot compile: try the next
                failures.append(f"{tiles.describe()}: {type(error).__name__}: {error}")
                continue
            break
        else:
            if not timings:
                raise XpuRuntimeError(
                    f"xrt_flash could not compile any tile configuration for {key[0]}: "
                    + " | ".join(failures)
                )
        if timings:
            _, best = min(timings, key=lambda item: item[0])
            launch(best)  # leave the fastest candidate's result in the outputs
            shown = ", ".join(f"{t.describe()}: {ms:.3f} ms" for ms, t in timings)
            detail = f"{best.describe()} (tuned: {shown})"
        else:
            best = tiles
            detail = best.describe() + (
                f" (first to compile; skipped {' | '.join(failures)})" if failures else " (fixed)"
            )
        _chosen[key] = (best, detail)
        return detail


def _scratch(device: torch.device) -> Callable[[int, int, int | None], torch.Tensor]:
    def allocate(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device=device)

    return allocate


def _launch(
    kernel: Any,
    grid: tuple[int, ...],
    tiles: TileConfig,
    device: torch.device,
    *args: Any,
    **constexprs: Any,
) -> None:
    _interpreting()  # applies the interpreter's bfloat16 fix before a CPU run

    def go() -> None:
        # Device-side tensor descriptors need scratch memory from Triton's allocator; set it
        # in a copied context so a caller's own allocator setting stays untouched.
        triton.set_allocator(_scratch(device))
        kernel[grid](*args, num_warps=tiles.num_warps, num_stages=tiles.num_stages, **constexprs)

    contextvars.copy_context().run(go)


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---------------------------------------------------------------------------------------


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
    tiles: TileConfig | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(output, log-sum-exp, detail). The log-sum-exp is float32, natural log, shaped
    (batch, heads, seqlen_q), or (heads, total_q) for ``layout="thd"``. ``out`` (same shape
    and dtype as ``q``, unit stride in the head dimension) receives the output if given."""
    q, k, v = (_inner_contiguous(x) for x in (q, k, v))
    q, scale = query_for_scale(q, scale, stream)
    g = _geometry(q, k, layout, varlen)
    scale = 1.0 / math.sqrt(g.head_dim) if scale is None else float(scale)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise UnsupportedOperationError(
            f"xrt_flash: the output buffer must match the query ({tuple(q.shape)} {q.dtype}, "
            f"unit stride in the head dimension), got {tuple(out.shape)} {out.dtype}"
        )
    if layout == "thd":
        lse = torch.empty((g.heads, q.shape[0]), dtype=torch.float32, device=q.device)
        lse_strides = (0, lse.stride(0))
    else:
        lse = torch.empty((g.batch, g.heads, g.seqlen_q), dtype=torch.float32, device=q.device)
        lse_strides = (lse.stride(0), lse.stride(1))
    sq, sk, sv, so = (_strides(x, layout) for x in (q, k, v, out))
    for name, x, s, n in (
        ("query", q, sq, g.seqlen_q),
        ("key", k, sk, g.seqlen_k),
        ("value", v, sv, g.seqlen_k),
    ):
        _check_offsets(name, x, s, n)
    if g.batch * g.heads == 0 or g.seqlen_q == 0:
        return out, lse.fill_(float("-inf")), "empty input"
    cu_q = varlen.cu_seqlens_q if varlen else q  # unused pointer when dense
    cu_k = varlen.cu_seqlens_k if varlen else q
    tma_ok = _tma_ready([q, k, v, out], layout)

    def launch(t: TileConfig) -> None:
        grid = (_cdiv(g.seqlen_q, t.block_m), g.batch * g.heads)
        _launch(
            _kernels._xrt_attn_fwd, grid, t, q.device,
            q, k, v, out, lse, cu_q, cu_k,
            sq.batch, sq.seq, sq.head, sk.batch, sk.seq, sk.head,
            sv.batch, sv.seq, sv.head, so.batch, so.seq, so.head, *lse_strides,
            g.seqlen_q, g.seqlen_k, g.heads, g.heads // g.kv_heads, scale * _LOG2E,
            HEAD_DIM=g.head_dim, BLOCK_M=t.block_m, BLOCK_N=t.block_n, CAUSAL=causal,
            VARLEN=varlen is not None, USE_TMA=t.tma and tma_ok,
            WARP_SPECIALIZE=t.warp_specialize,
        )  # fmt: skip

    with on_device(q.device, stream):
        if tiles is not None:
            launch(tiles)
            detail = tiles.describe() + " (given)"
        else:
            key = (
                "forward",
                _capability(q.device),
                g.head_dim,
                causal,
                q.dtype,
                varlen is not None,
                tma_ok,
                _length_bucket(g.seqlen_q, g.seqlen_k),
            )
            detail = _run_tiled(key, _candidates("forward", g.head_dim, q.device), launch, q.device)
    if not tma_ok and "tma" in detail:
        detail += "; tma off (unaligned base or strides)"
    return out, lse, "triton forward " + detail


def hopper_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """:func:`forward`'s contract on ``xrt_flash_hopper``, the Gluon Hopper forward
    (:mod:`.hopper`): dense or packed (``layout="thd"`` with ``varlen``) inputs; the output
    allocated contiguous in the inputs' layout unless ``out`` is given; the log-sum-exp
    :func:`backward` takes."""

    if out is None:  # empty_like's keywords: the cheapest to parse of torch's allocations
        out = torch.empty_like(q, memory_format=torch.contiguous_format)

    run = hopper.hopper_attention_forward_run(  # packed (total, heads, dim) rows as they are
        _bhsd(layout, q), _bhsd(layout, k), _bhsd(layout, v), causal=causal, scale=scale,
        stream=stream, out=_bhsd(layout, out),
        cu_seqlens_q=None if varlen is None else varlen.cu_seqlens_q,
        cu_seqlens_k=None if varlen is None else varlen.cu_seqlens_k,
        max_seqlen_q=None if varlen is None else varlen.max_seqlen_q,
        max_seqlen_k=None if varlen is None else varlen.max_seqlen_k,
    )  # fmt: skip
    ran = f"variant {run.variant.name}: " if run.variant is not None else ""
    return out, run.lse, f"gluon hopper forward (warp-specialised; {ran}{run.why})"


def backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(dq, dk, dv, detail) of the forward's output gradient; dk and dv are summed over the
    query heads that share each key/value head."""
    grad_out, q, k, v, out = (_inner_contiguous(x) for x in (grad_out, q, k, v, out))
    lse = lse.contiguous()
    g = _geometry(q, k, layout, varlen)
    scale = 1.0 / math.sqrt(g.head_dim) if scale is None else float(scale)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if g.batch * g.heads == 0 or g.seqlen_q == 0 or g.seqlen_k == 0:
        return dq.zero_(), dk.zero_(), dv.zero_(), "empty input"
    delta = torch.empty_like(lse)
    lse_strides = (0, lse.stride(0)) if layout == "thd" else (lse.stride(0), lse.stride(1))
    sq, sk, sv, so, sdo = (_strides(x, layout) for x in (q, k, v, out, grad_out))
    sdq, sdk, sdv = (_strides(x, layout) for x in (dq, dk, dv))
    cu_q = varlen.cu_seqlens_q if varlen else q
    cu_k = varlen.cu_seqlens_k if varlen else q
    group = g.heads // g.kv_heads
    is_varlen = varlen is not None

    def launch_dkdv(t: TileConfig) -> None:
        grid = (_cdiv(g.seqlen_k, t.block_n), g.batch * g.kv_heads)
        _launch(
            _kernels._xrt_attn_bwd_dkdv, grid, t, q.device,
            q, k, v, grad_out, lse, delta, dk, dv, cu_q, cu_k,
            sq.batch, sq.seq, sq.head, sk.batch, sk.seq, sk.head, sv.batch, sv.seq, sv.head,
            sdo.batch, sdo.seq, sdo.head, sdk.batch, sdk.seq, sdk.head,
            sdv.batch, sdv.seq, sdv.head, *lse_strides,
            g.seqlen_q, g.seqlen_k, g.kv_heads, group, scale * _LOG2E, scale,
            HEAD_DIM=g.head_dim, BLOCK_M=t.block_m, BLOCK_N=t.block_n, CAUSAL=causal,
            VARLEN=is_varlen,
        )  # fmt: skip

    def launch_dq(t: TileConfig) -> None:
        grid = (_cdiv(g.seqlen_q, t.block_m), g.batch * g.heads)
        _launch(
            _kernels._xrt_attn_bwd_dq, grid, t, q.device,
            q, k, v, grad_out, lse, delta, dq, cu_q, cu_k,
            sq.batch, sq.seq, sq.head, sk.batch, sk.seq, sk.head, sv.batch, sv.seq, sv.head,
            sdo.batch, sdo.seq, sdo.head, sdq.batch, sdq.seq, sdq.head, *lse_strides,
            g.seqlen_q, g.seqlen_k, g.heads, group, scale * _LOG2E, scale,
            HEAD_DIM=g.head_dim, BLOCK_M=t.block_m, BLOCK_N=t.block_n, CAUSAL=causal,
            VARLEN=is_varlen,
        )  # fmt: skip

    delta_tiles = TileConfig(64, 64, 4, 1)
    with on_device(q.device, stream):
        _launch(
            _kernels._xrt_attn_bwd_delta, (_cdiv(g.seqlen_q, 64), g.batch * g.heads),
            delta_tiles, q.device, out, grad_out, delta, cu_q,
            so.batch, so.seq, so.head, sdo.batch, sdo.seq, sdo.head, *lse_strides,
            g.seqlen_q, g.heads, HEAD_DIM=g.head_dim, BLOCK_M=64, VARLEN=is_varlen,
        )  # fmt: skip
        if tiles is not None:
            launch_dkdv(tiles[0])
            launch_dq(tiles[1])
            detail = f"dkdv {tiles[0].describe()}, dq {tiles[1].describe()} (given)"
        else:
            case = (
                _capability(q.device),
                g.head_dim,
                causal,
                q.dtype,
                is_varlen,
                _length_bucket(g.seqlen_q, g.seqlen_k),
            )
            dkdv = _run_tiled(
                ("dkdv", *case), _candidates("dkdv", g.head_dim, q.device), launch_dkdv, q.device
            )
            dqd = _run_tiled(
                ("dq", *case), _candidates("dq", g.head_dim, q.device), launch_dq, q.device
            )
            detail = f"dkdv {dkdv}, dq {dqd}"
    return dq, dk, dv, "triton backward " + detail


def _hopper_backward_unsupported(q: torch.Tensor, layout: Layout, batch: int) -> str:
    """'' when the Gluon Hopper backward (:mod:`.hopper_bwd`) takes these inputs, else why not
    (its own checks, read before the launch so that the call can go to xrt_flash instead);
    ``batch``: the number of sequences."""

    sizes = " and ".join(map(str, hopper_bwd.HEAD_DIMS))
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"the Hopper backward supports bfloat16 and float16, not {q.dtype}"
    if q.shape[-1] not in hopper_bwd.HEAD_DIMS:
        return f"the Hopper backward supports head sizes {sizes}, not {q.shape[-1]}"
    if q.device.type != "cuda":
        return f"the Hopper backward runs on CUDA sm_90 GPUs, not {q.device}"
    major, minor = _capability(q.device)
    if (major, minor) != (9, 0):
        return f"the Hopper backward runs on sm_90 GPUs, not compute capability {major}.{minor}"
    heads = q.shape[2 if layout == "bshd" else 1]
    if batch * heads > 65535:  # its grids' second dimension
        return f"the Hopper backward launches at most 65535 (batch, head) rows, not {batch * heads}"
    return ""


def hopper_backward_plan(
    q: torch.Tensor, *, causal: bool, layout: Layout, varlen: Varlen | None = None
) -> tuple[bool, str]:
    """(whether :func:`hopper_backward` runs the Gluon Hopper backward on this query, how its
    detail begins: which backward runs and why). The Gluon backward runs its fused kernel (dQ
    added with float32 atomics) or its deterministic kernels, per head size and mask as
    measured (:func:`.hopper_bwd.choose_variant`); under ``torch.use_deterministic_algorithms``
    and on packed sequences (``layout="thd"`` with ``varlen``) always the deterministic
    ones, on packed sequences on 2-D grids. Packed causal batches whose longest sequence is
    shorter than :data:`.hopper_bwd.PACKED_CAUSAL_MIN_ROWS` run xrt_flash's Triton backward,
    measured faster there."""
    packed = layout == "thd"
    batch = (varlen.cu_seqlens_q.numel() - 1 if varlen is not None else 1) if packed else q.shape[0]
    reason = _hopper_backward_unsupported(q, layout, batch)
    rows = varlen.max_seqlen_q if varlen is not None else 0
    if not reason and packed and causal and rows < hopper_bwd.PACKED_CAUSAL_MIN_ROWS:
        reason = (
            f"packed causal sequences of at most {rows} query rows: there the Gluon Hopper "
            "backward measured slower than xrt_flash's, below "
            f"{hopper_bwd.PACKED_CAUSAL_MIN_ROWS}"
        )
    if reason:
        return False, f"backward: xrt_flash's Triton kernels ({reason})"
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        variant, origin = hopper_bwd.choose_variant(
            q.shape[-1], causal=causal, deterministic=deterministic, packed=packed
        )
    except XpuRuntimeError as error:  # a malformed variant name: the backward itself raises
        return True, f"{HOPPER_BACKWARD} ({error})"
    named = "" if origin.startswith("default") else f"; variant {variant.name} {origin}"
    passed = origin.partition("; ")[2]  # a fused variant named, passed over
    if isinstance(variant, hopper_bwd.FusedVariant):
        path = f"fused dK/dV/dQ, fp32 atomic dQ; nondeterministic{named}"
    elif packed:
        path = "dK/dV + dQ kernels, deterministic, on 2-D grids: packed sequences take these"
        path += f"; {passed}" if passed else named
    elif deterministic:
        path = "dK/dV + dQ kernels, deterministic: torch.use_deterministic_algorithms is on"
        path += f"; {passed}" if passed else named
    elif named:
        path = f"dK/dV + dQ kernels, deterministic{named}"
    else:
        path = (
            "dK/dV + dQ kernels, deterministic: the default at this head size, measured faster "
            "than the fused kernel"
        )
    if variant.lpt and not named:
        path += "; causal: longest blocks first on 1-D grids"
    return True, f"{HOPPER_BACKWARD} ({path})"


def hopper_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool,
    scale: float | None,
    layout: Layout,
    varlen: Varlen | None = None,
    stream: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """:func:`backward`'s contract after an ``xrt_flash_hopper`` forward: the Gluon Hopper
    backward (:mod:`.hopper_bwd`; packed sequences too, ``layout="thd"`` with ``varlen``)
    where it takes the call, else xrt_flash's Triton backward on the same log-sum-exp; the
    detail says which ran (:func:`hopper_backward_plan`)."""
    gluon, plan = hopper_backward_plan(q, causal=causal, layout=layout, varlen=varlen)
    if not gluon:
        dq, dk, dv, detail = backward(
            grad_out, q, k, v, out, lse, causal=causal, scale=scale, layout=layout,
            varlen=varlen, stream=stream,
        )  # fmt: skip
        return dq, dk, dv, f"{plan}; {detail}"

    grad_out, q, k, v, out = (_inner_contiguous(x) for x in (grad_out, q, k, v, out))
    packed: dict[str, Any] = {}
    if varlen is not None:
        packed = {
            "cu_seqlens_q": varlen.cu_seqlens_q, "cu_seqlens_k": varlen.cu_seqlens_k,
            "max_seqlen_q": varlen.max_seqlen_q, "max_seqlen_k": varlen.max_seqlen_k,
        }  # fmt: skip
    grads = hopper_bwd.hopper_attention_backward(
        _bhsd(layout, grad_out), _bhsd(layout, q), _bhsd(layout, k), _bhsd(layout, v),
        _bhsd(layout, out), lse,
        causal=causal, scale=scale, deterministic=torch.are_deterministic_algorithms_enabled(),
        stream=stream, **packed,
    )  # fmt: skip
    # Its gradients keep the inputs' strides where TMA can store to them; the contract here
    # is contiguous in the layout (what the custom ops' fakes promise), so others are copied.
    with on_device(q.device, stream):
        dq, dk, dv = (_bhsd(layout, g).contiguous() for g in grads)
    return dq, dk, dv, plan
