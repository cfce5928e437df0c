"""The Hopper (sm_90a) forward of ``xrt_flash``, written in Gluon: FlashAttention-3's design.

Triton's ``tl.dot`` kernels (:mod:`._kernels`) leave the schedule to the compiler; this one
spells it out in Gluon (``triton.experimental.gluon``, Triton 3.6), so it runs only on Hopper:

- **Warp specialisation.** One CTA = a producer warp and two consumer warpgroups. The producer
  (24 registers after ``setmaxnreg``) issues TMA loads of the two query tiles and of every key
  and value tile into a ``NUM_STAGES``-deep shared-memory ring; each ring slot has a *ready*
  mbarrier (the copy engine completes it when the bytes land) and an *empty* one (every
  consumer arrives once its wgmma has read the slot, or, for a causal block all masked for
  its rows, once the block has landed: ``OWN_BLOCKS``). The consumers get the registers the
  producer gives up (240 each; 104-112 with two CTAs an SM, ``hopper.Variant.maxnreg``).
- **Two consumers, one query tile each.** Consumer warpgroup ``w`` owns query rows
  ``start_m + w * BLOCK_M_WG`` to ``+ BLOCK_M_WG``; both stream the same key/value tiles.
- **Ping-pong.** With ``PINGPONG`` the consumers take turns issuing their GEMMs (two "turn"
  mbarriers handed back and forth), so one warpgroup's softmax runs while the other's
  wgmmas own the tensor cores.
- **Softmax overlapped with the GEMMs inside a warpgroup.** Iteration ``j`` issues S_j = Q K_jᵀ
  and then O += P_{j-1} V_{j-1} (both async wgmma), waits only for S_j, runs the online softmax
  of block ``j`` while the P·V wgmma still runs, and waits for it last.
- **Causal tiles without ping-pong** (key blocks shorter than the CTA's rows): each consumer
  warpgroup stops at its own rows' last key block and releases the tile's later blocks,
  all masked for its rows, as they land (``OWN_BLOCKS`` in :func:`_consumer`).
- **P stays in registers**: converted to bf16/fp16 in the accumulator's register layout, it is
  the register A operand of the P·V wgmma (no shared-memory round trip).

Addressing: 4-D TMA descriptors over ``(batch, heads, seq, head_dim)`` with the tensors' own
strides (any layout with a unit-stride head dimension and 16-byte aligned strides), boxes
``[1, 1, rows, head_dim]``, so each head's sequence ends at its own boundary: the copy engine
fills rows past it with zeros and clips the output store there.
Grouped-query attention maps query head ``h`` to key/value head ``h // group``.

Packed variable-length batches (``VARLEN``, ``cu_seqlens``) use the same descriptors over a
``(1, heads, total, head_dim)`` view, offset by each sequence's first row: one host-built
descriptor serves every sequence (no per-CTA descriptor to build), so a tile running past a
sequence's end reads the next sequence's rows. Those keys are masked like the dense tail
(key columns at or past the sequence's length get -inf, so their values get weight 0: they
must be finite, as real tokens are); query rows past the end are computed and dropped: a tile that ends past its sequence stores its rows with masked stores instead
of TMA. The grid covers the longest sequence; tiles past a shorter one's end return at once.

Numerics follow :mod:`._kernels` exactly: base-2 softmax (``qk_scale = scale * log2(e)``),
float32 statistics, causal masking top-left aligned (query ``i`` sees keys ``j <= i``),
keys past ``seqlen_k`` masked with -inf, and the natural-log log-sum-exp (float32,
``(batch, heads, seqlen_q)``, or ``(heads, total_q)`` packed) that the backward of
:mod:`._kernels` reads. Packed causal masking is top-left within each sequence, as there.
"""

from __future__ import annotations

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language import PropagateNan

from xpuruntime.kernels.attention import exp_modes

LN2: gl.constexpr = gl.constexpr(0.6931471805599453)
PROPAGATE_NAN: gl.constexpr = gl.constexpr(PropagateNan.ALL)
#: fp8: log2 of the probabilities' factor (p <= 2**P_SHIFT: e4m3's range, whose largest
#: finite value is 448, keeps probabilities down to 2**-17 instead of flushing those below
#: 2**-9), as :mod:`._fp8_kernels` does it.
P_SHIFT: gl.constexpr = gl.constexpr(8.0)
#: Lazy rescaling (``LAZY``, FlashAttention-4's): a row's running max moves only when a block's
#: max exceeds it by more than 2**LAZY_T, so after a row's first blocks O's rescale (one
#: multiply per accumulator element a block) is skipped. P is then at most 2**LAZY_T times
#: the probability against the row's true max: 16-bit P holds that exactly; fp8 P, whose
#: largest finite value is 448, takes LAZY_T_FP8 out of its shift (P <= 2**P_SHIFT still).
LAZY_T: gl.constexpr = gl.constexpr(8.0)
LAZY_T_FP8: gl.constexpr = gl.constexpr(4.0)
#: Four e4m3 ones (0x38) in a 32-bit word.
E4M3_ONES: gl.constexpr = gl.constexpr(0x38383838)
#: ``EXP_MODE``, how the softmax's exponentials are computed (:mod:`.exp_modes`).
EXP_POLY4: gl.constexpr = gl.constexpr(exp_modes.POLY4)
EXP_HALF_BITS: gl.constexpr = gl.constexpr(exp_modes.HALF_BITS)
#: ``EXP_HALF_BITS`` (:data:`_HALF_BITS_ASM`): the exponents x from -HALF_BITS_BIAS on, over
#: HALF_BITS_OCTAVES octaves, map to [0, 1]. The bias is a half's exponent bias, 15, less
#: log2 of the linear interpolation's mean excess over an octave (the integral of
#: (1 + f) / 2**f over [0, 1), 1 / (2 ln(2)**2)), so that P, and with it the rows' sums and
#: the log-sum-exp, is not high on average (O, their ratio, does not see the factor).
HALF_BITS_BIAS: gl.constexpr = gl.constexpr(15 - math.log2(1 / (2 * math.log(2) ** 2)))
HALF_BITS_OCTAVES: gl.constexpr = gl.constexpr(32.0)


@gluon.constexpr_function
def _rescale_if_moved_asm(n):
    """PTX for ``n`` accumulator values times their rows' rescale factors, skipped by a branch
    when the thread's factors are all 1 (no row of its moved its max). Operands: ``$0..``
    the results, tied to the accumulator inputs after them, then the factors. A thread's
    first four accumulator values cover both its rows (wgmma's accumulator: values 0-1 row
    r, 2-3 row r + 8), so their factors decide; a warp whose threads all skip issues six
    instructions instead of ``n`` multiplies."""
    f = 2 * n  # first factor operand
    test = "".join(f"setp.neu.or.f32 moved, ${f + i}, 0f3F800000, moved;\n" for i in range(1, 4))
    muls = "".join(f"mul.f32 ${i}, ${n + i}, ${f + i};\n" for i in range(n))
    return (
        "{\n.reg .pred moved;\n"
        f"setp.neu.f32 moved, ${f}, 0f3F800000;\n{test}"
        f"@!moved bra SKIP;\n{muls}SKIP:\n}}"
    )


@gluon.constexpr_function
def _rescale_constraints(n):
    return ",".join(["=f"] * n + [str(i) for i in range(n)] + ["f"] * n)


@gluon.constexpr_function
def _lazy_threshold(fp8, lazy):
    """:data:`LAZY_T` (16-bit) or :data:`LAZY_T_FP8` with ``lazy``, else 0 (always move)."""
    return (LAZY_T_FP8.value if fp8 else LAZY_T.value) if lazy else 0.0


#: The running max of a row after a block, per thread (two rows each: operands 0-1 the
#: results, 2-3 the thread's own candidates, max(running, its columns' max), 4-5 the
#: thresholds, running + LAZY_T, 6-7 the running max). The lanes of a row's quad agree only
#: when some thread of the warp has a candidate past its threshold (a vote, so the branch is
#: the warp's): then the quad's max (two shuffles) moves the rows past their thresholds. A
#: block whose maxima stay (most blocks after a row's first) needs no cross-lane step. With
#: ``propagate_nan`` a NaN candidate moves the max to NaN (unordered compares, max.NaN).
@gluon.constexpr_function
def _quad_max_if_moved_asm(propagate_nan):
    gt, mx = ("gtu", "max.NaN.f32") if propagate_nan else ("gt", "max.f32")
    return (
        "{\n.reg .pred mv, any;\n.reg .f32 a, b, t;\n"
        f"setp.{gt}.f32 mv, $2, $4;\n"
        f"setp.{gt}.or.f32 mv, $3, $5, mv;\n"
        "vote.sync.any.pred any, mv, 0xffffffff;\n"
        "mov.f32 $0, $6;\nmov.f32 $1, $7;\n"
        "@!any bra DONE;\n"
        "mov.f32 a, $2;\nmov.f32 b, $3;\n"
        f"shfl.sync.bfly.b32 t, a, 1, 0x1f, 0xffffffff;\n{mx} a, a, t;\n"
        f"shfl.sync.bfly.b32 t, b, 1, 0x1f, 0xffffffff;\n{mx} b, b, t;\n"
        f"shfl.sync.bfly.b32 t, a, 2, 0x1f, 0xffffffff;\n{mx} a, a, t;\n"
        f"shfl.sync.bfly.b32 t, b, 2, 0x1f, 0xffffffff;\n{mx} b, b, t;\n"
        f"setp.{gt}.f32 mv, a, $4;\n@mv mov.f32 $0, a;\n"
        f"setp.{gt}.f32 mv, b, $5;\n@mv mov.f32 $1, b;\n"
        "DONE:\n}"
    )


@gluon.jit
def _max_nan(a, b):
    return gl.maximum(a, b, propagate_nan=PROPAGATE_NAN)


@gluon.jit
def _maximum(a, b, NAN: gl.constexpr):
    """max(a, b) elementwise; with ``NAN`` a NaN in either gives NaN (PTX max.NaN, as
    cheap), where the plain max passes it over."""
    if NAN:
        return _max_nan(a, b)
    else:
        return gl.maximum(a, b)


@gluon.jit
def _max(x, axis: gl.constexpr, NAN: gl.constexpr):
    """x's max along ``axis``; with ``NAN`` NaN if any of it is (see :func:`_maximum`)."""
    if NAN:
        return gl.reduce(x, axis, _max_nan)
    else:
        return gl.max(x, axis)


@gluon.constexpr_function
def _p_shift(fp8, lazy):
    """fp8 P's factor (log2; see :data:`P_SHIFT` and :data:`LAZY_T`), 0 for 16-bit P."""
    return P_SHIFT.value - _lazy_threshold(fp8, lazy) if fp8 else 0.0


def _exp2_one_in_four_asm() -> str:
    """PTX for 2**x of four float32 values: the first three on the special-function unit
    (``ex2.approx``), the last on the FMA pipe (FlashAttention-4's trick, here on Hopper).

    The special-function unit does 16 exponentials a clock per SM against 128 FMAs, so where
    a block's GEMMs are short (fp8) the softmax's exponentials take as long as they do;
    moving one in four to the FMA pipe shortens the softmax. There: x clamped to -126
    (2**-126 is below every probability that counts, and keeps the exponent field from
    wrapping), j = round(x) by the 1.5 * 2**23 trick (whose sum's low bits are j itself),
    f = x - j in [-0.5, 0.5], 2**f by a cubic (minimax relative error 7.5e-5, under the
    rounding of every dtype P is converted to), and j added to the exponent field. Only for
    finite x (unmasked blocks): -inf would give 2**-126, not 0."""
    mufu = "".join(f"ex2.approx.ftz.f32 ${i}, ${4 + i};\n" for i in range(3))
    return (
        "{\n.reg .f32 x, t, j, f, p;\n.reg .b32 tb, pb;\n"
        "max.ftz.f32 x, $7, 0fC2FC0000;\n"  # -126
        "add.rn.ftz.f32 t, x, 0f4B400000;\n"  # 1.5 * 2**23
        "sub.rn.ftz.f32 j, t, 0f4B400000;\n"
        "sub.rn.ftz.f32 f, x, j;\n"
        "fma.rn.ftz.f32 p, f, 0f3D61FB53, 0f3E786EE6;\n"  # 0.0551713, 0.2426105
        "fma.rn.ftz.f32 p, p, f, 0f3F31798D;\n"  # 0.6932610
        "fma.rn.ftz.f32 p, p, f, 0f3F7FFB4A;\n"  # 0.9999281
        "mov.b32 tb, t;\nshl.b32 tb, tb, 23;\nmov.b32 pb, p;\nadd.s32 pb, pb, tb;\n"
        f"mov.b32 $3, pb;\n{mufu}}}"
    )


_EXP2_ONE_IN_4: gl.constexpr = gl.constexpr(_exp2_one_in_four_asm())


@gluon.constexpr_function
def _keeps_nan(mode):
    """Whether the running max must carry a NaN score (as NaN): half bits read a NaN score
    as P = 0 (:data:`_HALF_BITS_ASM`), so the row's NaN has to reach O through its max (and
    the factor of its older blocks), as an exponential's NaN P does."""
    return mode == exp_modes.HALF_BITS


@gluon.constexpr_function
def _masked_mode(mode):
    """``EXP_MODE`` of a masked block: the polynomial takes finite values only (a masked
    block's -inf would give 2**-126), so those blocks keep the special-function unit; half
    bits read -inf as 0, and P's form must be the unmasked blocks' (it is carried across)."""
    return mode if mode == exp_modes.HALF_BITS else exp_modes.SFU


_CONSTRAINTS_4: gl.constexpr = gl.constexpr(",".join(["=f"] * 4 + ["f"] * 4))


#: Four float32 values to four e4m3 bytes of one register, first value in the low byte.
_E4M3X4_ASM: gl.constexpr = gl.constexpr(
    "{\n.reg .b16 lo, hi;\n"
    "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
    "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
    "mov.b32 $0, {lo, hi};\n}"
)

#: ``EXP_HALF_BITS``: 2**x as the bits of a half, without an exponential (operands: the
#: result, then x's score, the scale and the offset, x = score * scale - offset). y = (x +
#: HALF_BITS_BIAS) / HALF_BITS_OCTAVES, saturated to [0, 1] by the multiply-add itself (-inf,
#: masked, and anything below the bias gives 0; NaN too, which the running max carries
#: instead: :func:`_softmax`), then t = 1.5 * 2**23 + 2**15 * y, whose low 16 bits are I =
#: round(2**10 * (x + bias)) in [0, 2**15]: read as a half, 2**floor(x) * (1 + frac(x)) over
#: the bias, 2**x interpolated linearly within each octave (Schraudolph's trick; -3.9 % to
#: +2.0 % of it with the bias's correction), which the conversion to e4m3
#: (:data:`_E4M3X4_FROM_HALF_BITS_ASM`) rounds to 3 bits (errors of up to 6.25 %). I stays a
#: finite half, below 0x7C00, while x + bias < 31: x is at most the fp8 P's shift, 8
#: (:func:`_softmax` asserts it), so P is at most about 2**8 (e4m3's largest is 448). Both
#: multiply-adds are the FMA pipe's, which the softmax leaves idle, where an exponential
#: takes the special-function unit (16 a clock an SM), which bounded the fp8 blocks.
_HALF_BITS_ASM: gl.constexpr = gl.constexpr(
    "{\n.reg .f32 y;\n"
    "fma.rn.sat.f32 y, $1, $2, $3;\n"
    "fma.rn.f32 $0, y, 0f47000000, 0f4B400000;\n}"  # 2**15, 1.5 * 2**23
)

#: Four of :data:`_HALF_BITS_ASM`'s float32 values to four e4m3 bytes of one register, first
#: value in the low byte: their low halves paired by byte permutes, each pair converted.
_E4M3X4_FROM_HALF_BITS_ASM: gl.constexpr = gl.constexpr(
    "{\n.reg .b32 h01, h23;\n.reg .b16 lo, hi;\n"
    "prmt.b32 h01, $1, $2, 0x5410;\n"
    "prmt.b32 h23, $3, $4, 0x5410;\n"
    "cvt.rn.satfinite.e4m3x2.f16x2 lo, h01;\n"
    "cvt.rn.satfinite.e4m3x2.f16x2 hi, h23;\n"
    "mov.b32 $0, {lo, hi};\n}"
)


@gluon.jit
def _exp2(x, EXP_MODE: gl.constexpr):
    """2**x of finite ``x``; with :data:`EXP_POLY4` one value in four on the FMA pipe
    (:func:`_exp2_one_in_four_asm`), else all on the special-function unit."""
    if EXP_MODE == EXP_POLY4:
        return gl.inline_asm_elementwise(
            _EXP2_ONE_IN_4, _CONSTRAINTS_4, [x], dtype=gl.float32, is_pure=True, pack=4
        )
    else:
        return gl.exp2(x)


@gluon.jit
def _probabilities(x, scale, offset, EXP_MODE: gl.constexpr):
    """P = 2**(x * scale - offset) (``offset`` broadcast to ``x``), or with
    :data:`EXP_HALF_BITS` the float32 whose low half's bits are P (:data:`_HALF_BITS_ASM`),
    which only :func:`_p_operand` reads."""
    if EXP_MODE == EXP_HALF_BITS:
        return gl.inline_asm_elementwise(
            _HALF_BITS_ASM, "=f,f,f,f",
            [x, gl.full(x.shape, scale / HALF_BITS_OCTAVES, gl.float32, x.type.layout),
             (HALF_BITS_BIAS - offset) / HALF_BITS_OCTAVES],
            dtype=gl.float32, is_pure=True, pack=1,
        )  # fmt: skip
    else:
        return _exp2(x * scale - offset, EXP_MODE)


@gluon.jit
def _box(buf, desc):
    """A 2-D shared-memory tile seen as the descriptor's [1, 1, rows, head_dim] box (same
    bytes: leading 1s change neither the addresses nor the swizzle)."""
    return buf._reinterpret(buf.dtype, desc.block_type.shape, desc.layout)


@gluon.jit
def _release(bar):
    """Tell the producer that this warpgroup is done with a shared-memory buffer. The arrive
    is issued by one thread, so every warp of the group must first be past its wgmma wait.
    (Triton 3.6's shared-memory barrier analysis puts a barrier before every mbarrier arrive
    that follows shared-memory reads anyway: dropping this one leaves the same code.)"""
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _turn_wait(turn_bars, rnd, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Wait until it is this warpgroup's turn to issue GEMMs (round ``rnd``; the warpgroups
    go round-robin, 0 first). Warpgroup 0 waits for the last one's pass of the previous
    round, which a fresh mbarrier (counting as having completed the phase of parity 1)
    stands in for at round 0; the others wait for their predecessor's pass of this round."""
    if PINGPONG:
        mbarrier.wait(turn_bars.index(WG), (rnd & 1) ^ (1 if WG == 0 else 0))


@gluon.jit
def _turn_pass(turn_bars, WG: gl.constexpr, NUM_WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Hand the tensor cores to the next warpgroup (its GEMMs queue behind ours)."""
    if PINGPONG:
        gl.thread_barrier()  # every warp of the group has issued its wgmmas
        mbarrier.arrive(turn_bars.index((WG + 1) % NUM_WG), count=1)


@gluon.jit
def _visible_scores(s, rows, cols, seqlen_k, qk_scale, CAUSAL: gl.constexpr):
    """Scaled scores of a masked block: -inf for keys past ``seqlen_k`` and, causal, for
    keys after the row (top-left aligned): one compare a score, against the row's end."""
    end = gl.expand_dims(gl.minimum(rows + 1, seqlen_k), 1) if CAUSAL else seqlen_k
    return gl.where(gl.expand_dims(cols, 0) < end, s * qk_scale, float("-inf"))


@gluon.jit
def _by_lane(x):
    """A tile in the wgmma accumulator layout, [M, N], as [M, N // 8, 4, 2]: column
    8 i + 2 t + e at (i, t, e), ``t`` being the lane within its row's quad. Reductions over
    axes 1 and 3 stay inside each thread (no shuffle) and leave [M, 4], one value per row
    and lane (:func:`_lane_layout`)."""
    return gl.reshape(x, [x.shape[0], x.shape[1] // 8, 4, 2])


@gluon.constexpr_function
def _lane_layout(layout4):
    """The layout of [M, 4] per-lane row values of a :func:`_by_lane` tile's ``layout4``."""
    return gl.SliceLayout(1, gl.SliceLayout(3, layout4))


@gluon.jit
def _per_element(v, x4):
    """[M, 4] per-lane row values ``v`` broadcast over the :func:`_by_lane` tile ``x4``."""
    v = gl.convert_layout(v, _lane_layout(x4.type.layout))
    return gl.expand_dims(gl.expand_dims(v, 1), 3)


@gluon.jit
def _softmax_by_lane(
    s, m_i, l_i, rows, cols, seqlen_k, qk_scale, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
    EXP_MODE: gl.constexpr, P_SHIFT: gl.constexpr, LAZY_T: gl.constexpr, ROW_SUM: gl.constexpr,
):  # fmt: skip
    """:func:`_softmax` with a lazy running max whose statistics stay per lane ([M, 4]:
    each lane of a row's quad holds the row's running max, the same in all four, and its
    own columns' share of the sum), so a block needs no shuffle unless a row's max moves
    (:func:`_quad_max_if_moved_asm`); the sums meet once, at the tile's end. Returns P
    (float32, [M, N]), the factor, the running max and the partial sums, all but P per
    lane."""
    NAN: gl.constexpr = _keeps_nan(EXP_MODE)
    if MASKED:
        qk = _by_lane(_visible_scores(s, rows, cols, seqlen_k, qk_scale, CAUSAL))
        own = _max(_max(qk, 3, NAN), 1, NAN)
    else:
        x = _by_lane(s)
        own = _max(_max(x, 3, NAN), 1, NAN) * qk_scale
    m_i = gl.convert_layout(m_i, own.type.layout)
    m_ij = gl.inline_asm_elementwise(
        _quad_max_if_moved_asm(NAN), "=f,=f,f,f,f,f,f,f",
        [_maximum(m_i, own, NAN), m_i + LAZY_T, m_i], dtype=gl.float32, is_pure=True, pack=2,
    )  # fmt: skip
    if MASKED:
        # A row with no visible key so far keeps m = -inf; subtract 0 instead (no NaN).
        m_ij = gl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = _probabilities(qk, 1.0, _per_element(m_ij - P_SHIFT, qk), _masked_mode(EXP_MODE))
    else:
        p = _probabilities(x, qk_scale, _per_element(m_ij - P_SHIFT, x), EXP_MODE)
    alpha = gl.exp2(m_i - m_ij)
    if ROW_SUM:
        l_i = gl.convert_layout(l_i, own.type.layout) * alpha + gl.sum(gl.sum(p, 3), 1)
    return gl.reshape(p, [s.shape[0], s.shape[1]]), alpha, m_ij, l_i


@gluon.jit
def _softmax_by_row(
    s, m_i, l_i, rows, cols, seqlen_k, qk_scale, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
    EXP_MODE: gl.constexpr, P_SHIFT: gl.constexpr, ROW_SUM: gl.constexpr,
):  # fmt: skip
    """:func:`_softmax` with its statistics per row (every block's max and sum meet across
    the row's quad)."""
    NAN: gl.constexpr = _keeps_nan(EXP_MODE)
    if MASKED:
        qk = _visible_scores(s, rows, cols, seqlen_k, qk_scale, CAUSAL)
        m_ij = _maximum(m_i, _max(qk, 1, NAN), NAN)
        # A row with no visible key so far keeps m = -inf; subtract 0 instead (no NaN).
        m_ij = gl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = _probabilities(qk, 1.0, gl.expand_dims(m_ij - P_SHIFT, 1), _masked_mode(EXP_MODE))
    else:
        m_ij = _maximum(m_i, _max(s, 1, NAN) * qk_scale, NAN)
        p = _probabilities(s, qk_scale, gl.expand_dims(m_ij - P_SHIFT, 1), EXP_MODE)
    alpha = gl.exp2(m_i - m_ij)
    if ROW_SUM:
        l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_ij, l_i


@gluon.jit
def _softmax(
    s, m_i, l_i, rows, cols, seqlen_k, qk_scale, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
    EXP_MODE: gl.constexpr, P_SHIFT: gl.constexpr = 0.0, LAZY_T: gl.constexpr = 0.0,
    ROW_SUM: gl.constexpr = True,
):  # fmt: skip
    """One online-softmax step on a score tile, as ``_kernels._fwd_blocks`` does it:
    returns P (float32, unnormalised), the rescale factor of the older blocks, and the new
    running max and sum (base 2). ``EXP_MODE``: see :func:`_probabilities` (the polynomial
    on unmasked blocks only; with :data:`EXP_HALF_BITS` P is its half bits' float32, which
    only :func:`_p_operand` reads, so the sum is the caller's: ``ROW_SUM`` false).
    ``P_SHIFT``: P is ``2**P_SHIFT`` times the probability (the fp8 kernel's range), and so
    is the sum; the running max is not shifted. ``LAZY_T``: the running max moves only by
    more than ``LAZY_T`` (:data:`LAZY_T`), and the statistics are per lane
    (:func:`_softmax_by_lane`; the factor is exactly 1 for a row whose max stayed).
    Without ``ROW_SUM`` the sum is left to the caller (``l_i`` comes back as given)."""
    gl.static_assert(
        EXP_MODE != EXP_HALF_BITS or P_SHIFT + LAZY_T + HALF_BITS_BIAS < 31,
        "half bits: the largest P's half must stay finite (see _HALF_BITS_ASM)",
    )
    if LAZY_T > 0:
        p, alpha, m_ij, l_i = _softmax_by_lane(
            s, m_i, l_i, rows, cols, seqlen_k, qk_scale, CAUSAL, MASKED, EXP_MODE, P_SHIFT,
            LAZY_T, ROW_SUM,
        )  # fmt: skip
    else:
        p, alpha, m_ij, l_i = _softmax_by_row(
            s, m_i, l_i, rows, cols, seqlen_k, qk_scale, CAUSAL, MASKED, EXP_MODE, P_SHIFT,
            ROW_SUM,
        )  # fmt: skip
    return p, alpha, m_ij, l_i


@gluon.jit
def _rescale(acc, alpha, LAZY: gl.constexpr):
    """O's older blocks times their rows' factors ``alpha``; with ``LAZY`` (factors exactly 1
    where the max stayed) a thread whose rows all stayed skips the multiplies
    (:func:`_rescale_if_moved_asm`)."""
    if LAZY:  # factors per lane (_softmax_by_lane)
        acc4 = _by_lane(acc)
        n: gl.constexpr = acc.shape[0] * acc.shape[1] // (32 * gl.num_warps())
        acc4 = gl.inline_asm_elementwise(
            _rescale_if_moved_asm(n), _rescale_constraints(n), [acc4, _per_element(alpha, acc4)],
            dtype=gl.float32, is_pure=True, pack=n,
        )  # fmt: skip
        return gl.convert_layout(gl.reshape(acc4, [acc.shape[0], acc.shape[1]]), acc.type.layout)
    else:
        return acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout)), 1)


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, layout: gl.constexpr, EXP_MODE: gl.constexpr):
    """P (float32, the S accumulator's layout) as the register A operand of P·V in ``dtype``.

    16-bit: the accumulator's registers already hold what the operand needs (two values per
    32-bit register). fp8: the operand wants four consecutive keys per register, k = 16h +
    4t + i for lane t % 4, while the accumulator holds keys 8c + 2t + e; moving them across
    lanes costs shuffles and byte permutes per block. Instead P's keys are relabelled within
    each 32-key group, key 8c + 2t + e becoming k = 16(c >> 1) + 4t + 2(c & 1) + e, which is
    a register renaming, and the value's keys are stored in the same order
    (:data:`.fp8.HOPPER_KEY_ORDER`), so the sum over k is unchanged."""
    if dtype.primitive_bitwidth == 8:
        M: gl.constexpr = p.shape[0]
        N: gl.constexpr = p.shape[1]
        # key = 32 g + 16 b4 + 8 b3 + 4 b2 + 2 b1 + b0  ->  k = 32 g + 16 b4 + 8 b2 + 4 b1 + 2 b3 + b0
        x = gl.reshape(p, [M, N // 32, 2, 2, 2, 2, 2])
        x = gl.permute(x, [0, 1, 2, 4, 5, 3, 6])
        # Renamed in float32 (no data moves), then converted: four consecutive keys of a row
        # per register, packed by the conversion itself (Triton's own cast would unpack the
        # bytes and insert them back one by one).
        x = gl.convert_layout(gl.reshape(x, [M, N]), layout)
        if EXP_MODE == EXP_HALF_BITS:
            asm: gl.constexpr = _E4M3X4_FROM_HALF_BITS_ASM
        else:
            asm: gl.constexpr = _E4M3X4_ASM
        return gl.inline_asm_elementwise(
            asm, "=r,r,r,r,r", [x], dtype=gl.float8e4nv, is_pure=True, pack=4
        )
    else:
        return gl.convert_layout(p.to(dtype), layout)


@gluon.jit
def _section_order(item, num_blocks, batch_heads, section):
    """(block index, batch x head) of ``item`` in the 1-D order of ``batch_heads`` heads of
    ``num_blocks`` blocks each: heads in sections of ``section`` (what the CTAs of one
    section stream fits in L2 together), within a section block-index-major, heads minor, so
    the CTAs running at once share a few heads' data. The forward's and the backward's 1-D
    grids and schedules use it; callers map block index 0 to their longest blocks."""
    per_section = section * num_blocks
    first_bh = (item // per_section) * section
    size = gl.minimum(section, batch_heads - first_bh)  # the last section may be short
    r = item % per_section
    return r // size, first_bh + r % size


@gluon.jit
def _entry(SCHED, tile, PERSISTENT: gl.constexpr):
    """The work item at position ``tile`` of this CTA's range (:func:`_tiles`), as
    :func:`_work` takes it: ``PERSISTENT``, the schedule's entry (a load from ``SCHED``);
    else ``tile`` itself."""
    if PERSISTENT:
        return gl.load(SCHED + tile)
    else:
        return tile


@gluon.jit
def _work(
    item, seqlen_q, num_heads, batch_heads, section,
    BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr, LPT: gl.constexpr,
):  # fmt: skip
    """The work item ``item`` (:func:`_entry`): (batch, head, batch x head, first query
    row). Without ``PERSISTENT`` or ``LPT`` the program ids name it (a 2-D grid).
    ``seqlen_q`` is the grid's (the longest) query length.

    The 1-D order (``LPT``: one CTA per item, which the hardware dispatches in this order as
    earlier CTAs finish; ``PERSISTENT``: the items of the CTA's part of the schedule,
    ``SCHED``): (batch x head) runs in sections of ``section``
    (their keys and values fit in L2 together); within a section the query tiles go
    row-block-major, heads minor, so the CTAs running at once share a few heads' keys.
    Causal: within a section the last query tiles (the most key blocks) come first, so the
    short tiles fill its end."""
    num_m = gl.cdiv(seqlen_q, BLOCK_M)
    if PERSISTENT or LPT:
        m_idx, bh = _section_order(item, num_m, batch_heads, section)
    else:
        m_idx = gl.program_id(0)
        bh = gl.program_id(1)
    if CAUSAL:
        m_idx = num_m - 1 - m_idx  # the longest rows start first
    b = bh // num_heads
    h = bh % num_heads
    return b, h, bh, m_idx * BLOCK_M


@gluon.jit
def _sequence(CU_Q, CU_K, b, seqlen_q, seqlen_k, VARLEN: gl.constexpr):
    """(first query row, first key row, query length, key length) of batch ``b``: with
    ``VARLEN`` its rows of the packed tensors, read from ``cu_seqlens``; else 0, 0 and the
    dense lengths."""
    if VARLEN:
        q_start = gl.load(CU_Q + b)
        k_start = gl.load(CU_K + b)
        seqlen_q = gl.load(CU_Q + b + 1) - q_start
        seqlen_k = gl.load(CU_K + b + 1) - k_start
    else:
        q_start = 0
        k_start = 0
    return q_start, k_start, seqlen_q, seqlen_k


@gluon.jit
def _key_blocks(
    start_m, seqlen_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
    VARLEN: gl.constexpr,
):  # fmt: skip
    """(key blocks every row of the tile sees in full, key blocks) of the query tile at
    ``start_m``. A packed sequence without keys still runs block 0, all of it masked, so its
    rows get zeros and log-sum-exp -inf as in :mod:`._kernels` (dense calls never have no
    key: the launcher answers those)."""
    if CAUSAL:
        hi = gl.minimum(start_m + BLOCK_M, seqlen_k)
        n_full = gl.minimum(start_m + 1, seqlen_k) // BLOCK_N
    else:
        hi = seqlen_k
        n_full = seqlen_k // BLOCK_N
    n_blocks = gl.cdiv(hi, BLOCK_N)
    if VARLEN:
        n_blocks = gl.maximum(n_blocks, 1)
    return n_full, n_blocks


@gluon.jit
def _tiles(PERSISTENT: gl.constexpr, LPT: gl.constexpr, SCHED):
    """This CTA's work items as range bounds: its part of the schedule (``PERSISTENT``:
    ``SCHED[pid]`` to ``SCHED[pid + 1]``, positions of ``SCHED`` holding items, see
    :func:`_work`), the one item its id names (``LPT``), or the one the program ids name."""
    if PERSISTENT:
        first = gl.load(SCHED + gl.program_id(0))
        end = gl.load(SCHED + gl.program_id(0) + 1)
    elif LPT:
        first = gl.program_id(0)
        end = first + 1
    else:
        first = 0
        end = 1
    return first, end


@gluon.jit
def _value_operand(v_tile, FP8: gl.constexpr):
    """A value tile as P·V's B operand: fp8 tiles are stored transposed (fp8 wgmma reads
    K-major)."""
    if FP8:
        return v_tile.permute((1, 0))
    else:
        return v_tile


@gluon.jit
def _block_scale(qk_scale, ks_row, j, BLOCK_N: gl.constexpr, K_SCALE_BLOCK: gl.constexpr,
                 FP8: gl.constexpr):  # fmt: skip
    """Key block ``j``'s score scale: fp8 scores scale by the block's key scale too."""
    if FP8:
        return qk_scale * gl.load(ks_row + (j * BLOCK_N) // K_SCALE_BLOCK)
    else:
        return qk_scale


@gluon.jit
def _block_sums(p_op, ones_tile, acc_l, alpha, LAZY: gl.constexpr, P_LAYOUT_L: gl.constexpr):
    """``SUM_MMA``: the older blocks' row sums ``acc_l`` rescaled as O is, and the GEMM of
    this block's P (``p_op``, P·V's operand) against ``ones_tile`` ([SUM_COLUMNS, keys] of
    ones) issued from a zero accumulator, to be added in float32 once it is done
    (:func:`_consumer_blocks`). Returns the rescaled sums and the GEMM's token."""
    acc_l = _rescale(acc_l, alpha, LAZY)
    tok = warpgroup_mma(
        gl.convert_layout(p_op, P_LAYOUT_L), ones_tile.permute((1, 0)), gl.zeros_like(acc_l),
        use_acc=False, is_async=True,
    )  # fmt: skip
    return acc_l, tok


@gluon.jit
def _consumer_blocks(
    lo, hi, ring0, turn0, q, k_smem, v_smem, ones_smem, k_ready, k_empty, v_ready, v_empty,
    turn_bars, acc, acc_l, p, alpha, m_i, l_i, s_init, rows, offs_n, seqlen_k, qk_scale,
    ks_row,
    WG: gl.constexpr, NUM_WG: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, MASKED: gl.constexpr, PINGPONG: gl.constexpr,
    EXP_MODE: gl.constexpr, K_SCALE_BLOCK: gl.constexpr, P_LAYOUT: gl.constexpr,
    P_F32: gl.constexpr, LAZY: gl.constexpr, ONE_GEMM: gl.constexpr, P_LAYOUT_L: gl.constexpr,
    SUM_MMA: gl.constexpr,
):  # fmt: skip
    """Key blocks ``lo`` to ``hi`` (``lo >= 1``): S_j = Q K_jᵀ overlapped with O += P_{j-1} V_{j-1}
    (``ONE_GEMM``: O += P_{j-1} V_{j-1}, then S_j, each waited for before the next is issued).
    Block ``j`` sits at ring position ``ring0 + j`` and GEMM round ``turn0 + j``. fp8: block
    ``j``'s scores scale by its key scale too (``ks_row``: this head's, one per
    ``K_SCALE_BLOCK`` keys), and the value tiles are transposed (fp8 wgmma reads K-major).

    ``p`` is carried to the next block as P·V's operand (``P_LAYOUT``), or with ``P_F32``
    (fp8) in float32, converted just before its GEMM: a loop-carried fp8 operand is held as
    single bytes, unpacked and packed again (about a hundred byte permutes a block), which
    the conversion in the same block avoids, for 48 more registers. (16-bit P carried in
    float32 saves its 2-byte permutes too, but measured no faster on an H200.)

    ``ONE_GEMM`` (``g1``; for two CTAs an SM, ``o2``): with both GEMMs in flight a consumer
    needs 105-112 registers and there one of the two gets 104, for which ptxas serialises
    every wgmma of the kernel (C7512: each k-step waits for the one before). One GEMM at a
    time fits, its k-steps pipelined; the other CTA's warpgroups hide this one's softmax.

    ``SUM_MMA`` (``u``, fp8): each block's row sums of P come from a GEMM of P
    (``P_LAYOUT_L``: the same registers as P·V's operand) against a [keys, SUM_COLUMNS] tile
    of ones (``ones_smem``, one per ring stage), issued behind P·V; they are added in float32
    to ``acc_l`` ([rows, SUM_COLUMNS], every column the same), which is rescaled with O. The
    softmax then skips its sum, one float32 add per probability: in fp8 a tenth of the
    instructions a block issues (39 net of 607 with the GEMM's own), while its GEMMs take
    half the time of 16-bit ones. Each block's sum starts from zero (:func:`_block_sums`):
    e4m3 wgmma keeps about 13 bits of the accumulator it adds to, so a running sum in the tensor cores loses the low bits of every
    block's share (a row sum only grows; O's signed sums did not show it). The sum is of
    the P that P·V multiplies (rounded to e4m3), so O's numerator and denominator round
    alike."""
    FP8: gl.constexpr = q.dtype.primitive_bitwidth == 8
    # In flight behind S_j while the softmax runs: P·V, and the sums' GEMM.
    BEHIND_S: gl.constexpr = 2 if SUM_MMA else 1
    for j in range(lo, hi):
        it = ring0 + j
        slot = it % NUM_STAGES
        prev = (it - 1) % NUM_STAGES
        if LAZY and j > lo and not ONE_GEMM:
            # The previous block's value slot, released here rather than after its P·V wait
            # at the end of the last iteration: there ptxas schedules the release's barrier,
            # and with it that wait, early in the softmax, which then does not overlap its
            # own P·V (SASS in docs/attention.md).
            _release(v_empty.index((it - 2) % NUM_STAGES))
        if ONE_GEMM:
            acc = _rescale(acc, alpha, LAZY)
            p_op = _p_operand(p, q.dtype, P_LAYOUT, EXP_MODE) if P_F32 else p
            mbarrier.wait(v_ready.index(prev), ((it - 1) // NUM_STAGES) & 1)
            _turn_wait(turn_bars, turn0 + j, WG, PINGPONG)
            v_op = _value_operand(v_smem.index(prev), FP8)
            o_tok = warpgroup_mma(p_op, v_op, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok,))
            _release(v_empty.index(prev))
            mbarrier.wait(k_ready.index(slot), (it // NUM_STAGES) & 1)
            s_tok = warpgroup_mma(
                q, k_smem.index(slot).permute((1, 0)), s_init, use_acc=False, is_async=True
            )
            _turn_pass(turn_bars, WG, NUM_WG, PINGPONG)
            block_scale = _block_scale(qk_scale, ks_row, j, BLOCK_N, K_SCALE_BLOCK, FP8)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        else:
            mbarrier.wait(k_ready.index(slot), (it // NUM_STAGES) & 1)
            _turn_wait(turn_bars, turn0 + j, WG, PINGPONG)
            s_tok = warpgroup_mma(
                q, k_smem.index(slot).permute((1, 0)), s_init, use_acc=False, is_async=True
            )
            # (fp8: the scale's load waits behind the GEMM.)
            block_scale = _block_scale(qk_scale, ks_row, j, BLOCK_N, K_SCALE_BLOCK, FP8)
            v_op = _value_operand(v_smem.index(prev), FP8)
            # Rescale the older blocks' sum while S_j runs, then queue P_{j-1} V_{j-1} behind
            # it.
            acc = _rescale(acc, alpha, LAZY)
            p_op = _p_operand(p, q.dtype, P_LAYOUT, EXP_MODE) if P_F32 else p
            mbarrier.wait(v_ready.index(prev), ((it - 1) // NUM_STAGES) & 1)
            o_tok = warpgroup_mma(p_op, v_op, acc, is_async=True)
            if SUM_MMA:
                acc_l, l_tok = _block_sums(
                    p_op, ones_smem.index(prev), acc_l, alpha, LAZY, P_LAYOUT_L
                )
            _turn_pass(turn_bars, WG, NUM_WG, PINGPONG)
            s = warpgroup_mma_wait(num_outstanding=BEHIND_S, deps=(s_tok,))
        _release(k_empty.index(slot))
        p_new, alpha, m_i, l_i = _softmax(
            s, m_i, l_i, rows, j * BLOCK_N + offs_n, seqlen_k, block_scale, CAUSAL, MASKED,
            EXP_MODE, _p_shift(FP8, LAZY), _lazy_threshold(FP8, LAZY), not SUM_MMA,
        )  # fmt: skip
        if SUM_MMA:
            acc, block_sum = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, l_tok))
            acc_l += block_sum
        elif not ONE_GEMM:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok,))
        if not ONE_GEMM and not LAZY:
            _release(v_empty.index(prev))
        p = p_new if P_F32 else _p_operand(p_new, p.dtype, P_LAYOUT, EXP_MODE)
    if LAZY and hi > lo and not ONE_GEMM:
        _release(v_empty.index((ring0 + hi - 2) % NUM_STAGES))
    return acc, acc_l, p, alpha, m_i, l_i


@gluon.jit
def _store_rows(
    o_buf, Out, row0, n_rows, h, stride_os, stride_oh,
    BLOCK_M_WG: gl.constexpr, HEAD_DIM: gl.constexpr,
):  # fmt: skip
    """The staged output tile's first ``n_rows`` rows (of a packed sequence that ends inside
    the tile) to rows ``row0 + i`` of head ``h``, with masked stores: a TMA store would
    write the rows past the end, which belong to the next sequence."""
    per_row: gl.constexpr = HEAD_DIM // 8  # threads per row, 16 bytes each
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // per_row, per_row], [4, 1], [1, 0])
    gl.thread_barrier()  # every warp's rows of the tile are in shared memory
    tile = o_buf.load(layout)
    rows = gl.arange(0, BLOCK_M_WG, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    base = Out + h.to(gl.int64) * stride_oh + row0.to(gl.int64) * stride_os
    ptrs = base + gl.expand_dims(rows.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols, 0)
    keep = gl.expand_dims(rows < n_rows, 1) & gl.expand_dims(cols < HEAD_DIM, 0)
    gl.store(ptrs, tile, mask=keep)


@gluon.jit
def _consumer(
    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty, v_ready, v_empty,
    turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED, stride_os, stride_oh,
    stride_lh, seqlen_q, seqlen_k, num_heads, group, batch_heads, section, q_blocks, k_blocks,
    qk_scale, WG: gl.constexpr, NUM_WG: gl.constexpr, Q_BUFFERS: gl.constexpr,
    HEAD_DIM: gl.constexpr, BLOCK_M_WG: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
    PINGPONG: gl.constexpr, PERSISTENT: gl.constexpr, LPT: gl.constexpr, VARLEN: gl.constexpr,
    EXP_MODE: gl.constexpr, K_SCALE_BLOCK: gl.constexpr, P_F32: gl.constexpr,
    LAZY: gl.constexpr, ONE_GEMM: gl.constexpr, SUM_MMA: gl.constexpr, V_PER_HEAD: gl.constexpr,
):  # fmt: skip
    """Consumer warpgroup ``WG``: for each work item, its BLOCK_M_WG query rows against every
    key block. The ring position and GEMM round run on across work items (as the producer's).
    fp8 (e4m3 tiles): the scores scale by the query block's scale (``QS``, one per
    BLOCK_M_WG rows: ``q_blocks`` per head) and the key block's (``KS``: ``k_blocks`` per
    key/value head), the output by the value's channel scales (``VS``; ``V_PER_HEAD``: one
    per key/value head, folded into the rows' normalisation). Live item ``count``
    finds its query tile in buffer ``count % Q_BUFFERS`` (``q_smem``/``q_bars``/``q_empty``
    entry ``buffer * NUM_WG + WG``). ``SUM_MMA``: the rows' sums by a GEMM against
    ``ones_smem`` (:func:`_consumer_blocks`)."""
    dtype: gl.constexpr = q_smem.dtype
    FP8: gl.constexpr = dtype.primitive_bitwidth == 8
    BLOCK_M: gl.constexpr = NUM_WG * BLOCK_M_WG
    # wgmma's K per instruction is 32 bytes: 16 elements of 16 bits, 32 of fp8.
    K_INSTR: gl.constexpr = 256 // dtype.primitive_bitwidth
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, K_INSTR]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, K_INSTR]
    )
    # P as the register A operand of P·V: the S accumulator's registers, 32 bits of P each.
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=mma_o, k_width=32 // dtype.primitive_bitwidth
    )
    # SUM_MMA: the sums' accumulator (as many equal columns as the ones' tiles have rows)
    # and P as its A operand, whose registers are P·V's (the A layout does not depend on N).
    SUM_COLUMNS: gl.constexpr = ones_smem.shape[1]
    mma_l: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, SUM_COLUMNS, K_INSTR]
    )
    p_layout_l: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=mma_l, k_width=32 // dtype.primitive_bitwidth
    )
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s))
    s_init = gl.zeros([BLOCK_M_WG, BLOCK_N], gl.float32, layout=mma_s)
    o_buf = o_smem.index(WG)  # the query tile itself unless PERSISTENT or fp8

    # Causal, without ping-pong, a warpgroup stops at its own rows' last key block: the
    # tile's last blocks (key blocks shorter than the tile) are all masked for the earlier
    # rows. (Ping-pong's turns count every block of the tile, so there both run them all.)
    OWN_BLOCKS: gl.constexpr = CAUSAL and not PINGPONG and BLOCK_N < BLOCK_M
    ring0 = 0
    count = 0
    first, end = _tiles(PERSISTENT, LPT, SCHED)
    # (The min keeps the read in bounds whatever the range; the launcher gives every CTA an
    # item.)
    entry = _entry(SCHED, gl.minimum(first, end - 1), PERSISTENT)
    for tile in range(first, end):
        b, h, bh, start_m = _work(
            entry, seqlen_q, num_heads, batch_heads, section, BLOCK_M, CAUSAL, PERSISTENT, LPT
        )
        # The next item's entry, loaded now: its latency hides behind this item instead of
        # stalling the next one's start (the last item loads its own again).
        entry = _entry(SCHED, gl.minimum(tile + 1, end - 1), PERSISTENT)
        q_start, _k_start, len_q, len_k = _sequence(CU_Q, CU_K, b, seqlen_q, seqlen_k, VARLEN)
        if VARLEN:
            live = start_m < len_q  # as the producer: tiles past the sequence are skipped
        else:
            live: gl.constexpr = True  # a constant: dense code has no branch here
        if live:
            n_full, n_blocks = _key_blocks(start_m, len_k, BLOCK_M, BLOCK_N, CAUSAL, VARLEN)
            turn0 = ring0 + count  # each earlier item took n_blocks + 1 GEMM rounds
            row0 = start_m + WG * BLOCK_M_WG  # rows of the sequence (masks, log-sum-exp)
            if OWN_BLOCKS:
                n_full, n_mine = _key_blocks(row0, len_k, BLOCK_M_WG, BLOCK_N, CAUSAL, VARLEN)
            else:
                n_mine = n_blocks
            rows = row0 + gl.arange(0, BLOCK_M_WG, layout=row_s)
            if LAZY:  # per lane (_softmax_by_lane)
                lanes: gl.constexpr = _lane_layout(_by_lane(s_init).type.layout)
                m_i = gl.full([BLOCK_M_WG, 4], float("-inf"), gl.float32, layout=lanes)
                l_i = gl.zeros([BLOCK_M_WG, 4], gl.float32, layout=lanes)
            else:
                m_i = gl.full([BLOCK_M_WG], float("-inf"), gl.float32, layout=row_s)
                l_i = gl.zeros([BLOCK_M_WG], gl.float32, layout=row_s)
            acc = gl.zeros([BLOCK_M_WG, HEAD_DIM], gl.float32, layout=mma_o)
            acc_l = gl.zeros([BLOCK_M_WG, SUM_COLUMNS], gl.float32, layout=mma_l)
            if FP8:
                # This head's key scales, and the query block's scale (folded into the
                # scores' once S_0 is issued: the loads' latency hides behind the waits).
                ks_row = KS + (bh // group).to(gl.int64) * k_blocks
                # (A warpgroup whose rows all lie past the end reads the last block's scale;
                # its rows are never stored.)
                q_block = gl.minimum(row0 // BLOCK_M_WG, q_blocks - 1)
                q_scale = gl.load(QS + bh.to(gl.int64) * q_blocks + q_block)
                k_scale0 = gl.load(ks_row)
            else:
                ks_row = KS  # unused
                q_scale = 1.0  # (16-bit scores take the softmax scale alone)
                k_scale0 = 1.0
            q_at = (count % Q_BUFFERS) * NUM_WG + WG
            q = q_smem.index(q_at)
            mbarrier.wait(q_bars.index(q_at), (count // Q_BUFFERS) & 1)

            # Key block 0: S_0 and its softmax (masked where it holds the causal diagonal or
            # the end).
            slot0 = ring0 % NUM_STAGES
            mbarrier.wait(k_ready.index(slot0), (ring0 // NUM_STAGES) & 1)
            _turn_wait(turn_bars, turn0, WG, PINGPONG)
            s_tok = warpgroup_mma(
                q, k_smem.index(slot0).permute((1, 0)), s_init, use_acc=False, is_async=True
            )
            _turn_pass(turn_bars, WG, NUM_WG, PINGPONG)
            qk_scale_wg = qk_scale * q_scale
            scale0 = qk_scale_wg * k_scale0
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
            _release(k_empty.index(slot0))
            if n_full > 0:
                # Every row sees block 0 in full: the unmasked softmax (the masked one takes
                # 1.4-1.5x its instructions, with no GEMM of this warpgroup to hide behind).
                p32, alpha, m_i, l_i = _softmax(
                    s, m_i, l_i, rows, offs_n, len_k, scale0, CAUSAL, False, EXP_MODE,
                    _p_shift(FP8, LAZY), _lazy_threshold(FP8, LAZY), not SUM_MMA,
                )  # fmt: skip
            else:
                p32, alpha, m_i, l_i = _softmax(
                    s, m_i, l_i, rows, offs_n, len_k, scale0, CAUSAL, True, EXP_MODE,
                    _p_shift(FP8, LAZY), _lazy_threshold(FP8, LAZY), not SUM_MMA,
                )  # fmt: skip
            # P_F32: converted before its GEMM (see _consumer_blocks).
            p = p32 if P_F32 else _p_operand(p32, dtype, p_layout, EXP_MODE)

            # Blocks every row sees in full (no mask), then the causal diagonal and the end.
            acc, acc_l, p, alpha, m_i, l_i = _consumer_blocks(
                1, n_full, ring0, turn0, q, k_smem, v_smem, ones_smem, k_ready, k_empty, v_ready,
                v_empty, turn_bars, acc, acc_l, p, alpha, m_i, l_i, s_init, rows, offs_n,
                len_k, qk_scale_wg, ks_row, WG, NUM_WG, BLOCK_N, NUM_STAGES, CAUSAL, False,
                PINGPONG, EXP_MODE, K_SCALE_BLOCK, p_layout, P_F32, LAZY, ONE_GEMM, p_layout_l,
                SUM_MMA,
            )  # fmt: skip
            acc, acc_l, p, alpha, m_i, l_i = _consumer_blocks(
                gl.maximum(n_full, 1), n_mine, ring0, turn0, q, k_smem, v_smem, ones_smem,
                k_ready, k_empty, v_ready, v_empty, turn_bars, acc, acc_l, p, alpha, m_i, l_i,
                s_init, rows, offs_n, len_k, qk_scale_wg, ks_row, WG, NUM_WG, BLOCK_N,
                NUM_STAGES, CAUSAL, True, PINGPONG, EXP_MODE, K_SCALE_BLOCK, p_layout, P_F32,
                LAZY, ONE_GEMM, p_layout_l, SUM_MMA,
            )  # fmt: skip
            if PERSISTENT:
                # Every S GEMM of this item is done: the producer may load this buffer's next
                # query tile.
                _release(q_empty.index(q_at))

            # The last block's P·V.
            last = ring0 + n_mine - 1
            acc = _rescale(acc, alpha, LAZY)
            mbarrier.wait(v_ready.index(last % NUM_STAGES), (last // NUM_STAGES) & 1)
            _turn_wait(turn_bars, turn0 + n_blocks, WG, PINGPONG)
            if P_F32:
                p = _p_operand(p, dtype, p_layout, EXP_MODE)
            v_last = _value_operand(v_smem.index(last % NUM_STAGES), FP8)
            o_tok = warpgroup_mma(p, v_last, acc, is_async=True)
            if SUM_MMA:
                acc_l, l_tok = _block_sums(
                    p, ones_smem.index(last % NUM_STAGES), acc_l, alpha, LAZY, p_layout_l
                )
            _turn_pass(turn_bars, WG, NUM_WG, PINGPONG)
            if FP8 and V_PER_HEAD:  # loaded while the last P·V runs
                v_scale = gl.load(VS + (bh // group).to(gl.int64))
            elif FP8:
                # The value's channel scales, loaded while the last P·V runs.
                channels = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, mma_o))
                v_scale = gl.load(VS + (bh // group).to(gl.int64) * HEAD_DIM + channels)
            if SUM_MMA:
                acc, block_sum = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, l_tok))
                # Its columns are equal.
                l_i = gl.convert_layout(gl.max(acc_l + block_sum, 1), row_s)
            else:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok,))
            _release(v_empty.index(last % NUM_STAGES))

            if LAZY:  # the lanes' running maxima are the same (and their sums meet)
                if not SUM_MMA:
                    l_i = gl.convert_layout(gl.sum(l_i, 1), row_s)
                m_i = gl.convert_layout(gl.max(m_i, 1), row_s)
            # A row that saw no key returns zeros and log-sum-exp -inf (as _kernels does).
            empty = l_i == 0.0
            l_safe = gl.where(empty, 1.0, l_i)
            if FP8:  # the sum carries P's factor (_p_shift)
                lse = gl.where(
                    empty, float("-inf"), (m_i + gl.log2(l_safe) - _p_shift(FP8, LAZY)) * LN2
                )
            else:
                lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * LN2)
            if VARLEN:  # (heads, total_q)
                lse_ptrs = LSE + h.to(gl.int64) * stride_lh + q_start + rows
            else:  # (batch, heads, seqlen_q)
                lse_ptrs = LSE + bh.to(gl.int64) * seqlen_q + rows
            gl.store(lse_ptrs, lse, mask=rows < len_q)
            # V_PER_HEAD: the value's scale in the rows' factor, one multiply a row.
            row_factor = v_scale / l_safe if FP8 and V_PER_HEAD else 1.0 / l_safe
            out = acc * gl.expand_dims(gl.convert_layout(row_factor, row_o), 1)
            if FP8 and not V_PER_HEAD:  # the value's channel scales
                out = out * gl.expand_dims(v_scale, 0)
            if PERSISTENT:
                # The previous item's output store must have left the staging tile (its
                # issuing thread waits; the barrier holds the other warps until it has).
                tma.store_wait(pendings=0)
                gl.thread_barrier()
            # Without PERSISTENT (and fp8) the staging tile is the query tile, free since the
            # last wgmma.
            o_buf.store(out.to(o_buf.dtype))
            if VARLEN:
                # Packed: the descriptor spans every sequence, so a tile that runs past this
                # one's end is stored row by row (the dense descriptor clips at the end).
                whole = row0 + BLOCK_M_WG <= len_q
                o_b = 0
            else:
                whole: gl.constexpr = True
                o_b = b
            if whole:
                fence_async_shared()
                tma.async_copy_shared_to_global(
                    o_desc, [o_b, h, q_start + row0, 0], _box(o_buf, o_desc)
                )
            else:
                _store_rows(
                    o_buf, Out, q_start + row0, len_q - row0, h, stride_os, stride_oh,
                    BLOCK_M_WG, HEAD_DIM,
                )  # fmt: skip
            if OWN_BLOCKS:
                # Release the tile's blocks this warpgroup skipped, each once it has landed:
                # an empty barrier counts both warpgroups' arrivals, and a loaded block means
                # both have released the slot's previous use, so this arrival counts for it.
                for j in range(n_mine, n_blocks):
                    it = ring0 + j
                    phase = (it // NUM_STAGES) & 1
                    mbarrier.wait(k_ready.index(it % NUM_STAGES), phase)
                    _release(k_empty.index(it % NUM_STAGES))
                    mbarrier.wait(v_ready.index(it % NUM_STAGES), phase)
                    _release(v_empty.index(it % NUM_STAGES))
            ring0 += n_blocks
            count += 1  # live items only: the query barriers' phase
    tma.store_wait(pendings=0)


@gluon.jit
def _producer(
    q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready, k_empty,
    v_ready, v_empty, CU_Q, CU_K, SCHED, seqlen_q, seqlen_k, num_heads, group, batch_heads,
    section, NUM_WG: gl.constexpr, Q_BUFFERS: gl.constexpr, BLOCK_M_WG: gl.constexpr,
    BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr, LPT: gl.constexpr, VARLEN: gl.constexpr,
):  # fmt: skip
    """The load warp: per work item, the query tiles, then key and value tiles through the
    ring (whose position runs on across items, so the next item's loads start as soon as
    slots free up). Packed sequences are rows of one (1, heads, total, head_dim) view: a
    tile that runs past its sequence's end reads the next one's rows (or zeros past the
    last), which the consumers mask (keys) or never store (queries). fp8 values come
    transposed, (batch, heads, head_dim, seq). With two query buffers (``Q_BUFFERS``) the
    next item's query tiles wait only for the item before this one to release theirs."""
    BLOCK_M: gl.constexpr = NUM_WG * BLOCK_M_WG
    FP8: gl.constexpr = q_desc.dtype.primitive_bitwidth == 8
    ring0 = 0
    count = 0
    first, end = _tiles(PERSISTENT, LPT, SCHED)
    for tile in range(first, end):
        b, h, _bh, start_m = _work(
            _entry(SCHED, tile, PERSISTENT), seqlen_q, num_heads, batch_heads, section, BLOCK_M,
            CAUSAL, PERSISTENT, LPT,
        )  # fmt: skip
        q_start, k_start, len_q, len_k = _sequence(CU_Q, CU_K, b, seqlen_q, seqlen_k, VARLEN)
        if VARLEN:
            live = start_m < len_q  # as the consumers: tiles past the sequence are skipped
            d_b = 0  # the descriptors' batch coordinate
        else:
            live: gl.constexpr = True
            d_b = b
        if live:
            _n_full, n_blocks = _key_blocks(start_m, len_k, BLOCK_M, BLOCK_N, CAUSAL, VARLEN)
            kv_h = h // group
            for w in gl.static_range(NUM_WG):
                q_at = (count % Q_BUFFERS) * NUM_WG + w
                if PERSISTENT:
                    # A fresh barrier counts as completed for parity 1: each buffer's first
                    # item is free.
                    mbarrier.wait(q_empty.index(q_at), ((count // Q_BUFFERS) & 1) ^ 1)
                mbarrier.expect(q_bars.index(q_at), q_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(
                    q_desc,
                    [d_b, h, q_start + start_m + w * BLOCK_M_WG, 0],
                    q_bars.index(q_at),
                    _box(q_smem.index(q_at), q_desc),
                )
            for j in range(n_blocks):
                it = ring0 + j
                slot = it % NUM_STAGES
                phase = (it // NUM_STAGES) & 1
                # A fresh "empty" barrier counts as completed for parity 1: the first pass is
                # free.
                mbarrier.wait(k_empty.index(slot), phase ^ 1)
                mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(
                    k_desc,
                    [d_b, kv_h, k_start + j * BLOCK_N, 0],
                    k_ready.index(slot),
                    _box(k_smem.index(slot), k_desc),
                )
                mbarrier.wait(v_empty.index(slot), phase ^ 1)
                mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
                if FP8:
                    v_at = [d_b, kv_h, 0, k_start + j * BLOCK_N]
                else:
                    v_at = [d_b, kv_h, k_start + j * BLOCK_N, 0]
                tma.async_copy_global_to_shared(
                    v_desc, v_at, v_ready.index(slot), _box(v_smem.index(slot), v_desc)
                )
            ring0 += n_blocks
            count += 1  # live items only: the query barriers' phase


# ``seqlen_k`` is never specialised: Triton compiles an integer argument equal to 1 as the
# constant 1, with which a one-key call's masked P is mostly known zeros, and the fp8 P
# conversion (:data:`_E4M3X4_ASM`) then converts equal pairs; ptxas 12.8 (Triton 3.6's)
# packs two equal e4m3 pairs into one register with its upper half taken from an
# uninitialised one (docs/attention.md: the sums' GEMM's ones hit the same bug), which gave
# every one-key fp8 call NaN or wrong rows on an H200.
@gluon.jit(do_not_specialize=["seqlen_k"])
def _xrt_attn_fwd_hopper(
    q_desc, k_desc, v_desc, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED, stride_os,
    stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group, batch_heads, section, q_blocks,
    k_blocks, qk_scale,
    HEAD_DIM: gl.constexpr, BLOCK_M_WG: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, NUM_WG: gl.constexpr,
    Q_BUFFERS: gl.constexpr, PERSISTENT: gl.constexpr, LPT: gl.constexpr, VARLEN: gl.constexpr,
    EXP_MODE: gl.constexpr, K_SCALE_BLOCK: gl.constexpr, P_F32: gl.constexpr,
    LAZY: gl.constexpr, ONE_GEMM: gl.constexpr, SUM_MMA: gl.constexpr,
    SUM_COLUMNS: gl.constexpr, V_PER_HEAD: gl.constexpr,
):  # fmt: skip
    """Launch with num_warps=4 (the first consumer warpgroup; the other ``NUM_WG - 1`` and
    the producer warp are worker partitions). One CTA per (NUM_WG * BLOCK_M_WG query rows,
    batch x head): a 2-D grid, or with ``LPT`` a 1-D grid in the longest-first order of
    :func:`_work` (``batch_heads`` = batch x heads, ``section`` = batch x heads per L2
    section). ``PERSISTENT``: a 1-D grid of at most one CTA per SM (two for ``o2``
    variants), each looping over the work items its part of ``SCHED`` names (int32: entries
    ``pid`` and ``pid + 1`` bound the CTA's positions in ``SCHED``, each position holding an
    item's index in that order; the launcher balances the CTAs' key blocks). Dense,
    ``seqlen_k`` must be positive (the launcher handles empty keys).

    ``VARLEN``: packed sequences, batch ``i`` being rows ``CU_Q[i]:CU_Q[i+1]`` (queries) and
    ``CU_K[i]:CU_K[i+1]`` (keys, values) of (total, heads, head_dim) tensors, seen by the
    descriptors as (1, heads, total, head_dim); ``seqlen_q``/``seqlen_k`` are then the
    longest lengths (the grid's), ``Out`` with ``stride_os``/``stride_oh`` addresses the
    output for the row-by-row store of a tile that ends past its sequence, and the
    log-sum-exp is (heads, total_q) with head stride ``stride_lh``. Dense calls leave those
    three unused. Packed calls run on the 2-D grid (over the longest sequence's query
    tiles).

    fp8 (descriptors of e4m3 query and key, and of the value transposed, (batch, kv_heads,
    head_dim, seqlen_k), as fp8 wgmma reads both operands K-major; the output descriptor's
    dtype is the output's): ``QS`` holds (batch x heads, ``q_blocks``) query scales, one per
    BLOCK_M_WG rows; ``KS`` (batch x kv_heads, ``k_blocks``) key scales, one per
    ``K_SCALE_BLOCK`` keys (a multiple of BLOCK_N); ``VS`` (batch x kv_heads, HEAD_DIM) the
    value's channel scales (``V_PER_HEAD``: batch x kv_heads, one a head), all float32 and
    contiguous. Dense only. 16-bit calls leave them unused. ``Q_BUFFERS``: query tiles per
    consumer warpgroup (two: ``PERSISTENT`` only, the next item's loads start before this
    item's last Q·Kᵀ). ``EXP_MODE``: how the softmax's
    exponentials are computed (:data:`EXP_POLY4`, :data:`EXP_HALF_BITS`). ``P_F32``:
    P carried between blocks in float32 (:func:`_consumer_blocks`; fp8 needs it). ``LAZY``:
    a row's running max moves only by more than :data:`LAZY_T` (fp8: :data:`LAZY_T_FP8`), and
    O's rescale is skipped where it stayed (:func:`_rescale`). ``ONE_GEMM``: a consumer
    warpgroup has one GEMM in flight at a time (:func:`_consumer_blocks`). ``SUM_MMA``: the
    rows' sums of P by a GEMM against ``SUM_COLUMNS`` rows of ones in shared memory
    (:func:`_consumer_blocks`)."""
    gl.static_assert(not ((PERSISTENT or LPT) and VARLEN), "packed batches run on a 2-D grid")
    gl.static_assert(not (PERSISTENT and LPT), "persistent or one CTA per item, not both")
    gl.static_assert(Q_BUFFERS == 1 or PERSISTENT, "two query buffers need a persistent loop")
    dtype: gl.constexpr = q_desc.dtype
    bits: gl.constexpr = dtype.primitive_bitwidth
    FP8: gl.constexpr = bits == 8
    gl.static_assert(not (FP8 and VARLEN), "fp8 takes dense batches")
    gl.static_assert(P_F32 or not FP8, "fp8 carries P in float32")
    gl.static_assert(not FP8 or K_SCALE_BLOCK % BLOCK_N == 0, "key scales span whole blocks")
    gl.static_assert(not (SUM_MMA and ONE_GEMM), "the sums' GEMM runs beside an overlapped P·V")
    gl.static_assert(
        EXP_MODE != EXP_HALF_BITS or (FP8 and SUM_MMA),
        "half bits make fp8 P, whose sums the sums' GEMM takes",
    )

    # 2-D tiles with the descriptors' swizzle: TMA fills them through a 4-D view (``_box``).
    tile_q: gl.constexpr = gl.NVMMASharedLayout(q_desc.layout.swizzle_byte_width, bits)
    tile_kv: gl.constexpr = gl.NVMMASharedLayout(k_desc.layout.swizzle_byte_width, bits)
    tile_v: gl.constexpr = gl.NVMMASharedLayout(v_desc.layout.swizzle_byte_width, bits)
    tile_o: gl.constexpr = gl.NVMMASharedLayout(
        o_desc.layout.swizzle_byte_width, o_desc.dtype.primitive_bitwidth
    )
    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFFERS * NUM_WG, BLOCK_M_WG, HEAD_DIM], tile_q)
    if PERSISTENT or FP8:
        # Its own output staging tiles: persistent, the next query tiles load while this item
        # finishes, and the output store need not complete before the next item starts; fp8,
        # the output is 16-bit.
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [NUM_WG, BLOCK_M_WG, HEAD_DIM], tile_o)
    else:
        o_smem = q_smem
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], tile_kv)
    if FP8:
        v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, HEAD_DIM, BLOCK_N], tile_v)
    else:
        v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], tile_v)
    if SUM_MMA:
        # [SUM_COLUMNS, keys] e4m3 tiles of ones, K-major as fp8 wgmma reads B; one per ring
        # stage, so that a tile's descriptor is computed in the loop as V's is (one tile's,
        # hoisted out of the loop, held registers and the kernel spilled). Written as 32-bit
        # words of four e4m3 ones: every byte is the same, so the swizzle does not matter,
        # and an e4m3 constant stored as such is packed by Triton 3.6's ptxas (12.8) with
        # half of each word from an unset register (docs/attention.md).
        gl.static_assert(FP8, "the sums' GEMM is for the fp8 kernel")
        gl.static_assert(BLOCK_N >= 128, "the ones' rows fill a 128-byte swizzle")
        # (An NVMMA layout, so the allocation is aligned as the swizzle of the e4m3 view needs.)
        words = gl.allocate_shared_memory(
            gl.int32, [NUM_STAGES, SUM_COLUMNS, BLOCK_N // 4], gl.NVMMASharedLayout(128, 32)
        )
        fill: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
        for i in gl.static_range(NUM_STAGES):
            words.index(i).store(
                gl.full([SUM_COLUMNS, BLOCK_N // 4], E4M3_ONES, gl.int32, layout=fill)
            )
        fence_async_shared()  # the consumers' wgmma reads them through the async proxy
        ones_smem = words._reinterpret(
            dtype, [NUM_STAGES, SUM_COLUMNS, BLOCK_N], gl.NVMMASharedLayout(128, bits)
        )
    else:
        ones_smem = k_smem  # unused
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_bars = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS * NUM_WG, 1], bar_layout)
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS * NUM_WG, 1], bar_layout)
    turn_bars = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    for i in gl.static_range(Q_BUFFERS * NUM_WG):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    for i in gl.static_range(NUM_WG):
        mbarrier.init(turn_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_WG)  # one arrive per consumer warpgroup
        mbarrier.init(v_empty.index(i), count=NUM_WG)

    # The default partition (this kernel's 4 warps) is consumer 0; the workers are the other
    # consumers (4 warps each) and the producer (1 warp). The default partition gets the
    # registers the others leave. The argument tuples are written inline: a tuple bound to a
    # name first would wrap its constexprs twice.
    # fmt: off
    if NUM_WG == 2:
        gl.warp_specialize(
            [
                (_consumer, (
                    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty,
                    v_ready, v_empty, turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED,
                    stride_os, stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group,
                    batch_heads, section, q_blocks, k_blocks, qk_scale, 0, NUM_WG, Q_BUFFERS,
                    HEAD_DIM, BLOCK_M_WG, BLOCK_N, NUM_STAGES, CAUSAL, PINGPONG, PERSISTENT, LPT,
                    VARLEN, EXP_MODE, K_SCALE_BLOCK, P_F32, LAZY, ONE_GEMM, SUM_MMA,
                    V_PER_HEAD,
                )),
                (_consumer, (
                    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty,
                    v_ready, v_empty, turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED,
                    stride_os, stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group,
                    batch_heads, section, q_blocks, k_blocks, qk_scale, 1, NUM_WG, Q_BUFFERS,
                    HEAD_DIM, BLOCK_M_WG, BLOCK_N, NUM_STAGES, CAUSAL, PINGPONG, PERSISTENT, LPT,
                    VARLEN, EXP_MODE, K_SCALE_BLOCK, P_F32, LAZY, ONE_GEMM, SUM_MMA,
                    V_PER_HEAD,
                )),
                (_producer, (
                    q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready,
                    k_empty, v_ready, v_empty, CU_Q, CU_K, SCHED, seqlen_q, seqlen_k, num_heads,
                    group, batch_heads, section, NUM_WG, Q_BUFFERS, BLOCK_M_WG, BLOCK_N,
                    NUM_STAGES, CAUSAL, PERSISTENT, LPT, VARLEN,
                )),
            ],
            [4, 1],
            [CONSUMER_REGS, PRODUCER_REGS],
        )
    else:
        gl.static_assert(NUM_WG == 3, "two or three consumer warpgroups")
        gl.warp_specialize(
            [
                (_consumer, (
                    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty,
                    v_ready, v_empty, turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED,
                    stride_os, stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group,
                    batch_heads, section, q_blocks, k_blocks, qk_scale, 0, NUM_WG, Q_BUFFERS,
                    HEAD_DIM, BLOCK_M_WG, BLOCK_N, NUM_STAGES, CAUSAL, PINGPONG, PERSISTENT, LPT,
                    VARLEN, EXP_MODE, K_SCALE_BLOCK, P_F32, LAZY, ONE_GEMM, SUM_MMA,
                    V_PER_HEAD,
                )),
                (_consumer, (
                    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty,
                    v_ready, v_empty, turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED,
                    stride_os, stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group,
                    batch_heads, section, q_blocks, k_blocks, qk_scale, 1, NUM_WG, Q_BUFFERS,
                    HEAD_DIM, BLOCK_M_WG, BLOCK_N, NUM_STAGES, CAUSAL, PINGPONG, PERSISTENT, LPT,
                    VARLEN, EXP_MODE, K_SCALE_BLOCK, P_F32, LAZY, ONE_GEMM, SUM_MMA,
                    V_PER_HEAD,
                )),
                (_consumer, (
                    q_smem, o_smem, k_smem, v_smem, ones_smem, q_bars, q_empty, k_ready, k_empty,
                    v_ready, v_empty, turn_bars, o_desc, Out, LSE, CU_Q, CU_K, QS, KS, VS, SCHED,
                    stride_os, stride_oh, stride_lh, seqlen_q, seqlen_k, num_heads, group,
                    batch_heads, section, q_blocks, k_blocks, qk_scale, 2, NUM_WG, Q_BUFFERS,
                    HEAD_DIM, BLOCK_M_WG, BLOCK_N, NUM_STAGES, CAUSAL, PINGPONG, PERSISTENT, LPT,
                    VARLEN, EXP_MODE, K_SCALE_BLOCK, P_F32, LAZY, ONE_GEMM, SUM_MMA,
                    V_PER_HEAD,
                )),
                (_producer, (
                    q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, q_empty, k_ready,
                    k_empty, v_ready, v_empty, CU_Q, CU_K, SCHED, seqlen_q, seqlen_k, num_heads,
                    group, batch_heads, section, NUM_WG, Q_BUFFERS, BLOCK_M_WG, BLOCK_N,
                    NUM_STAGES, CAUSAL, PERSISTENT, LPT, VARLEN,
                )),
            ],
            [4, 4, 1],
            [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS],
        )
    # fmt: on
