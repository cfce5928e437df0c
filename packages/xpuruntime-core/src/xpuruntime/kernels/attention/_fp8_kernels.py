"""The Triton kernels of ``xrt_flash_fp8``: attention forward with e4m3 operands.

Both GEMMs run in float8 e4m3 with float32 accumulation (Hopper's fp8 wgmma, ``QGMMA`` in
SASS; Ada's fp8 mma): twice the tensor-core rate of bfloat16 and half the bytes per tile.

Scales (float32, one multiply each, never per element of a GEMM operand):

- key: one scale per ``SCALE_BLOCK`` rows of one head (per-block), so an outlier token only
  coarsens its own block. Query: a float16/bfloat16 query (``QUANT_Q``) gets one scale per
  row, quantized in the kernel right after its one load; an e4m3 query brings its scale per
  ``SCALE_BLOCK`` rows. Both fold into the score scale of each query row and key block:
  ``s = (q8 @ k8ᵀ) · q_scale · k_scale · softmax_scale``.
- value: one scale per head channel (per sequence and key/value head), applied to the
  output at the end.
- probabilities: ``p = exp2(s - m + 8)`` lies in ``[0, 256]`` (e4m3's largest finite value
  is 448), which keeps probabilities down to 2**-17 representable instead of flushing those
  below 2**-9 to zero; the row sum ``l`` carries the same factor, so ``acc / l`` cancels it.

Fp8 wgmma reads both operands K-major: the value goes in transposed, ``(.., head_dim, seq)``
with the sequence contiguous, written so by :func:`_xrt_attn_quant_vt`.
"""

from __future__ import annotations

import triton
import triton.language as tl

LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
#: e4m3's largest finite value.
FP8_MAX: tl.constexpr = tl.constexpr(448.0)
#: log2 of the probabilities' factor (p <= 2**P_SHIFT).
P_SHIFT: tl.constexpr = tl.constexpr(8.0)


@triton.jit
def _xrt_attn_quant_rows(
    X, Y, SCALE, V, VMAX, CU,
    stride_xb, stride_xs, stride_xh,
    stride_yb, stride_ys, stride_yh,
    stride_sb, stride_sh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mh, stride_mk,
    seqlen, num_heads,
    HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, VARLEN: tl.constexpr,
    VALUE_MAX: tl.constexpr,
):  # fmt: skip
    """e4m3 copy of ``BLOCK`` rows of one head and their scale (max |x| / 448); with
    ``VALUE_MAX`` also the value's per-channel max |v| over the same rows, one row of
    ``VMAX`` per block (the host reduces the blocks: no contended atomics), so the key and
    the value are read in one pass."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    x_off = b.to(tl.int64) * stride_xb + h.to(tl.int64) * stride_xh
    y_off = b.to(tl.int64) * stride_yb + h.to(tl.int64) * stride_yh
    v_off = b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    if VARLEN:
        start = tl.load(CU + b)
        seqlen = tl.load(CU + b + 1) - start
        x_off += start.to(tl.int64) * stride_xs
        y_off += start.to(tl.int64) * stride_ys
        v_off += start.to(tl.int64) * stride_vs
    if pid * BLOCK >= seqlen:
        return
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    keep = rows[:, None] < seqlen
    x = tl.load(X + x_off + rows[:, None] * stride_xs + offs_d[None, :], mask=keep, other=0.0)
    x = x.to(tl.float32)
    amax = tl.max(tl.max(tl.abs(x), 1), 0)
    scale = tl.where(amax > 0.0, amax / FP8_MAX, 1.0)  # an all-zero block keeps scale 1
    y = (x * (1.0 / scale)).to(Y.dtype.element_ty)
    tl.store(Y + y_off + rows[:, None] * stride_ys + offs_d[None, :], y, mask=keep)
    tl.store(SCALE + b.to(tl.int64) * stride_sb + h * stride_sh + pid, scale)
    if VALUE_MAX:
        v = tl.load(V + v_off + rows[:, None] * stride_vs + offs_d[None, :], mask=keep, other=0.0)
        channel_max = tl.max(tl.abs(v.to(tl.float32)), 0)
        m_off = b.to(tl.int64) * stride_mb + h * stride_mh + pid * stride_mk
        tl.store(VMAX + m_off + offs_d, channel_max)


@triton.jit
def _xrt_attn_quant_vt(
    V, VT, VSCALE, CU,
    stride_vb, stride_vs, stride_vh,
    stride_tb, stride_th, stride_td,
    stride_sb, stride_sh,
    seqlen, num_heads,
    HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, VARLEN: tl.constexpr,
    HOPPER_ORDER: tl.constexpr,
):  # fmt: skip
    """e4m3 value, transposed to (head_dim, seq) per head, divided by its channel scales.
    ``HOPPER_ORDER``: keys in the Gluon Hopper kernel's order within each group of 32 (key
    16 b4 + 8 b3 + 4 b2 + 2 b1 + b0 at 16 b4 + 8 b2 + 4 b1 + 2 b3 + b0, its P operand's
    register order; ``fp8.HOPPER_KEY_ORDER``)."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    v_off = b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    t_off = b.to(tl.int64) * stride_tb + h.to(tl.int64) * stride_th
    if VARLEN:
        start = tl.load(CU + b)
        seqlen = tl.load(CU + b + 1) - start
        v_off += start.to(tl.int64) * stride_vs
        t_off += start.to(tl.int64)
    if pid * BLOCK >= seqlen:
        return
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    keep = rows[:, None] < seqlen
    x = tl.load(V + v_off + rows[:, None] * stride_vs + offs_d[None, :], mask=keep, other=0.0)
    scale = tl.load(VSCALE + b.to(tl.int64) * stride_sb + h * stride_sh + offs_d)
    y = (x.to(tl.float32) * (1.0 / scale)[None, :]).to(VT.dtype.element_ty)
    hopper_cols = (rows & ~31) | (rows & 0x11) | ((rows & 0x8) >> 2) | ((rows & 0x6) << 1)
    cols = hopper_cols if HOPPER_ORDER else rows
    tl.store(VT + t_off + offs_d[None, :] * stride_td + cols[:, None], y, mask=keep)


@triton.jit
def _fp8_blocks(
    acc, l_i, m_i, q, k_base, vt_base, ks_base, stride_ks, stride_td, stride_kss,
    offs_m, offs_n, offs_d, seqlen_k, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, SCALE_BLOCK: tl.constexpr, CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]
        vt_ptrs = vt_base + offs_d[:, None] * stride_td + cols[None, :]
        k = tl.load(k_ptrs, mask=cols[:, None] < seqlen_k, other=0.0) if MASKED else tl.load(k_ptrs)
        # per query row: softmax scale · log2(e) · query scale · this key block's scale
        s = qk_scale * tl.load(ks_base + (start_n // SCALE_BLOCK) * stride_kss)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            keep = cols[None, :] < seqlen_k
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(keep, qk * s[:, None], float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            # A row with no visible key so far keeps m = -inf; subtract 0 instead (no NaN).
            m_ij = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            qk = qk - (m_ij - P_SHIFT)[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * s)
            qk = qk * s[:, None] - (m_ij - P_SHIFT)[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            vt = tl.load(vt_ptrs, mask=cols[None, :] < seqlen_k, other=0.0)
        else:
            vt = tl.load(vt_ptrs)
        acc = tl.dot(p.to(vt.dtype), tl.trans(vt), acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _xrt_attn_fwd_fp8(
    Q, K, VT, QS, KS, VS, Out, LSE, CU_Q, CU_K,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_tb, stride_th, stride_td,
    stride_ob, stride_os, stride_oh,
    stride_lb, stride_lh,
    stride_qsb, stride_qsh, stride_qss,
    stride_ksb, stride_ksh, stride_kss,
    stride_vsb, stride_vsh, stride_vsd,
    seqlen_q, seqlen_k, num_heads, group, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SCALE_BLOCK: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
    QUANT_Q: tl.constexpr,
):  # fmt: skip
    tl.static_assert(SCALE_BLOCK % BLOCK_M == 0)  # one query scale per program
    tl.static_assert(SCALE_BLOCK % BLOCK_N == 0)  # one key scale per key block
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows start first
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    kvh = h // group
    q_off = b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_off = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
    t_off = b.to(tl.int64) * stride_tb + kvh.to(tl.int64) * stride_th
    o_off = b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    lse_off = b.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh
    if VARLEN:
        q_start = tl.load(CU_Q + b)
        k_start = tl.load(CU_K + b)
        seqlen_q = tl.load(CU_Q + b + 1) - q_start
        seqlen_k = tl.load(CU_K + b + 1) - k_start
        q_off += q_start.to(tl.int64) * stride_qs
        o_off += q_start.to(tl.int64) * stride_os
        k_off += k_start.to(tl.int64) * stride_ks
        t_off += k_start.to(tl.int64)
        lse_off += q_start.to(tl.int64)
    start_m = pid_m * BLOCK_M
    if start_m >= seqlen_q:
        return
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + q_off + offs_m[:, None] * stride_qs + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seqlen_q, other=0.0)
    if QUANT_Q:
        # float16/bfloat16 query: quantized here, one scale per row (each program reads its
        # query tile once, so this costs no pass over the query; a row's maximum needs no
        # barrier, and a per-row scale costs the key loop nothing, folded into ``s`` there).
        qf = q.to(tl.float32)
        q_amax = tl.max(tl.abs(qf), 1)
        q_scale = tl.where(q_amax > 0.0, q_amax / FP8_MAX, 1.0)
        q = (qf * (1.0 / q_scale)[:, None]).to(VT.dtype.element_ty)
    else:
        q_scale = tl.zeros([BLOCK_M], tl.float32) + tl.load(
            QS
            + b.to(tl.int64) * stride_qsb
            + h * stride_qsh
            + (start_m // SCALE_BLOCK) * stride_qss
        )
    ks_base = KS + b.to(tl.int64) * stride_ksb + kvh * stride_ksh
    qk_scale = qk_scale * q_scale

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, seqlen_k)
        full_end = (tl.minimum(start_m + 1, seqlen_k) // BLOCK_N) * BLOCK_N
    else:
        hi = seqlen_k
        full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _fp8_blocks(
        acc, l_i, m_i, q, K + k_off, VT + t_off, ks_base, stride_ks, stride_td, stride_kss,
        offs_m, offs_n, offs_d, seqlen_k, qk_scale, 0, full_end,
        BLOCK_N, SCALE_BLOCK, CAUSAL, False,
    )  # fmt: skip
    acc, l_i, m_i = _fp8_blocks(
        acc, l_i, m_i, q, K + k_off, VT + t_off, ks_base, stride_ks, stride_td, stride_kss,
        offs_m, offs_n, offs_d, seqlen_k, qk_scale, full_end, hi,
        BLOCK_N, SCALE_BLOCK, CAUSAL, True,
    )  # fmt: skip

    # A row that saw no key (an empty key sequence) returns zeros and log-sum-exp -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    v_scale = tl.load(VS + b.to(tl.int64) * stride_vsb + kvh * stride_vsh + offs_d * stride_vsd)
    out = acc * (1.0 / l_safe)[:, None] * v_scale[None, :]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe) - P_SHIFT) * LN2)
    tl.store(LSE + lse_off + offs_m, lse, mask=offs_m < seqlen_q)
    o_ptrs = Out + o_off + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < seqlen_q)
