"""The Triton kernels of ``xrt_flash``: FlashAttention-2's algorithm, written for Triton.

Layout: every tensor is addressed through (batch, sequence, head) strides with a contiguous
head dimension, so (B, S, H, D), (B, H, S, D) and packed variable-length (T, H, D) inputs all
run without copies. ``VARLEN`` reads each sequence's start and length from ``cu_seqlens``
(batch strides are then 0). Grouped-query attention maps query head ``h`` to key/value head
``h // group``.

Causal masking is top-left aligned (query ``i`` sees keys ``j <= i``), as
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``.

Softmax runs in base 2 (``qk_scale = scale * log2(e)``); the log-sum-exp written for the
backward is in natural log, as FlashAttention and PyTorch report it. Every key loop is split
into blocks that need no mask (no compare/select per element) and the few blocks on the
causal diagonal or the sequence end that do.

Kernel names start with ``_xrt_attn`` so profilers (and ``xpuruntime.pytorch.explain``)
attribute them to xpuruntime, not to FlashAttention.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)


@triton.jit
def _load_rows(
    desc, base, stride_s, start, offs, offs_d, seqlen, MASKED: tl.constexpr, USE_TMA: tl.constexpr
):
    """Rows ``start + offs`` of a (seq, HEAD_DIM) tile; rows past ``seqlen`` read as zero."""
    if USE_TMA:
        # The descriptor's shape ends at the sequence: the copy engine fills past it with zeros.
        return desc.load([start, 0])
    else:
        rows = start + offs
        ptrs = base + rows[:, None] * stride_s + offs_d[None, :]
        if MASKED:
            return tl.load(ptrs, mask=rows[:, None] < seqlen, other=0.0)
        else:
            return tl.load(ptrs)


@triton.jit
def _fwd_blocks(
    acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
    offs_m, offs_n, offs_d, seqlen_k, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    USE_TMA: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_rows(
            k_desc, k_base, stride_ks, start_n, offs_n, offs_d, seqlen_k, MASKED, USE_TMA
        )
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            cols = start_n + offs_n
            keep = cols[None, :] < seqlen_k
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            # A row with no visible key so far keeps m = -inf; subtract 0 instead (no NaN).
            m_ij = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_rows(
            v_desc, v_base, stride_vs, start_n, offs_n, offs_d, seqlen_k, MASKED, USE_TMA
        )
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _xrt_attn_fwd(
    Q, K, V, Out, LSE, CU_Q, CU_K,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ob, stride_os, stride_oh,
    stride_lb, stride_lh,
    seqlen_q, seqlen_k, num_heads, group, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, VARLEN: tl.constexpr, USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows start first
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    kvh = h // group
    q_off = b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_off = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
    v_off = b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
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
        v_off += k_start.to(tl.int64) * stride_vs
        lse_off += q_start.to(tl.int64)
    start_m = pid_m * BLOCK_M
    if start_m >= seqlen_q:
        return
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        q_desc = tl.make_tensor_descriptor(
            Q + q_off, [seqlen_q, HEAD_DIM], [stride_qs, 1], [BLOCK_M, HEAD_DIM]
        )
        k_desc = tl.make_tensor_descriptor(
            K + k_off, [seqlen_k, HEAD_DIM], [stride_ks, 1], [BLOCK_N, HEAD_DIM]
        )
        v_desc = tl.make_tensor_descriptor(
            V + v_off, [seqlen_k, HEAD_DIM], [stride_vs, 1], [BLOCK_N, HEAD_DIM]
        )
        q = q_desc.load([start_m, 0])
    else:
        q_desc = None
        k_desc = None
        v_desc = None
        q_ptrs = Q + q_off + offs_m[:, None] * stride_qs + offs_d[None, :]
        q = tl.load(q_ptrs, mask=offs_m[:, None] < seqlen_q, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, seqlen_k)
        full_end = (tl.minimum(start_m + 1, seqlen_k) // BLOCK_N) * BLOCK_N
    else:
        hi = seqlen_k
        full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, K + k_off, V + v_off, stride_ks, stride_vs,
        offs_m, offs_n, offs_d, seqlen_k, qk_scale, 0, full_end,
        BLOCK_N, CAUSAL, False, USE_TMA, WARP_SPECIALIZE,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, K + k_off, V + v_off, stride_ks, stride_vs,
        offs_m, offs_n, offs_d, seqlen_k, qk_scale, full_end, hi,
        BLOCK_N, CAUSAL, True, USE_TMA, WARP_SPECIALIZE,
    )  # fmt: skip

    # A row that saw no key (an empty key sequence) returns zeros and log-sum-exp -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    tl.store(LSE + lse_off + offs_m, lse, mask=offs_m < seqlen_q)
    if USE_TMA:
        o_desc = tl.make_tensor_descriptor(
            Out + o_off, [seqlen_q, HEAD_DIM], [stride_os, 1], [BLOCK_M, HEAD_DIM]
        )
        o_desc.store([start_m, 0], out.to(Out.dtype.element_ty))
    else:
        o_ptrs = Out + o_off + offs_m[:, None] * stride_os + offs_d[None, :]
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < seqlen_q)


@triton.jit
def _xrt_attn_bwd_delta(
    Out, DO, DELTA, CU_Q,
    stride_ob, stride_os, stride_oh,
    stride_dob, stride_dos, stride_doh,
    stride_lb, stride_lh,
    seqlen_q, num_heads,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, VARLEN: tl.constexpr,
):  # fmt: skip
    """delta = rowsum(out * d_out), the softmax-gradient term each backward block needs."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    o_off = b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    do_off = b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
    d_off = b.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh
    if VARLEN:
        q_start = tl.load(CU_Q + b)
        seqlen_q = tl.load(CU_Q + b + 1) - q_start
        o_off += q_start.to(tl.int64) * stride_os
        do_off += q_start.to(tl.int64) * stride_dos
        d_off += q_start.to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seqlen_q
    o = tl.load(
        Out + o_off + offs_m[:, None] * stride_os + offs_d[None, :], mask=rows[:, None], other=0.0
    )
    do = tl.load(
        DO + do_off + offs_m[:, None] * stride_dos + offs_d[None, :], mask=rows[:, None], other=0.0
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + d_off + offs_m, delta, mask=rows)


@triton.jit
def _dkdv_blocks(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qs, stride_dos,
    offs_n, offs_d, seqlen_q, qk_scale, lo, hi,
    BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    offs_r = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_r
        q_ptrs = q_base + offs_m[:, None] * stride_qs + offs_d[None, :]
        do_ptrs = do_base + offs_m[:, None] * stride_dos + offs_d[None, :]
        if MASKED:
            rows = offs_m < seqlen_q
            q = tl.load(q_ptrs, mask=rows[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=rows[:, None], other=0.0)
            lse2 = tl.load(lse_base + offs_m, mask=rows, other=0.0) * LOG2E
            delta = tl.load(delta_base + offs_m, mask=rows, other=0.0)
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse2 = tl.load(lse_base + offs_m) * LOG2E
            delta = tl.load(delta_base + offs_m)
        qkT = tl.dot(k, tl.trans(q)) * qk_scale
        if MASKED:
            keep = rows[None, :]
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            qkT = tl.where(keep, qkT, float("-inf"))
        pT = tl.math.exp2(qkT - lse2[None, :])
        dv = tl.dot(pT.to(do.dtype), do, dv)
        dpT = tl.dot(v, tl.trans(do))
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def _xrt_attn_bwd_dkdv(
    Q, K, V, DO, LSE, DELTA, DK, DV, CU_Q, CU_K,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dkb, stride_dks, stride_dkh,
    stride_dvb, stride_dvs, stride_dvh,
    stride_lb, stride_lh,
    seqlen_q, seqlen_k, num_kv_heads, group, qk_scale, scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key block, summed over the query heads sharing it (GQA, no atomics)."""
    tl.static_assert(BLOCK_N % BLOCK_M == 0)  # diagonal blocks tile the key block exactly
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // num_kv_heads
    kvh = bh % num_kv_heads
    q_off = b.to(tl.int64) * stride_qb
    do_off = b.to(tl.int64) * stride_dob
    lse_off = b.to(tl.int64) * stride_lb
    k_off = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
    v_off = b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
    dk_off = b.to(tl.int64) * stride_dkb + kvh.to(tl.int64) * stride_dkh
    dv_off = b.to(tl.int64) * stride_dvb + kvh.to(tl.int64) * stride_dvh
    if VARLEN:
        q_start = tl.load(CU_Q + b)
        k_start = tl.load(CU_K + b)
        seqlen_q = tl.load(CU_Q + b + 1) - q_start
        seqlen_k = tl.load(CU_K + b + 1) - k_start
        q_off += q_start.to(tl.int64) * stride_qs
        do_off += q_start.to(tl.int64) * stride_dos
        lse_off += q_start.to(tl.int64)
        k_off += k_start.to(tl.int64) * stride_ks
        v_off += k_start.to(tl.int64) * stride_vs
        dk_off += k_start.to(tl.int64) * stride_dks
        dv_off += k_start.to(tl.int64) * stride_dvs
    start_n = pid_n * BLOCK_N
    if start_n >= seqlen_k:
        return
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    cols = offs_n[:, None] < seqlen_k
    k = tl.load(K + k_off + offs_n[:, None] * stride_ks + offs_d[None, :], mask=cols, other=0.0)
    v = tl.load(V + v_off + offs_n[:, None] * stride_vs + offs_d[None, :], mask=cols, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    full_end = (seqlen_q // BLOCK_M) * BLOCK_M
    for g in range(group):
        h = (kvh * group + g).to(tl.int64)
        q_base = Q + q_off + h * stride_qh
        do_base = DO + do_off + h * stride_doh
        lse_base = LSE + lse_off + h * stride_lh
        delta_base = DELTA + lse_off + h * stride_lh
        if CAUSAL:
            # Queries before the key block see none of it; those on its diagonal see part.
            lo = start_n + BLOCK_N
            dk, dv = _dkdv_blocks(
                dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qs, stride_dos,
                offs_n, offs_d, seqlen_q, qk_scale, start_n, tl.minimum(lo, seqlen_q),
                BLOCK_M, CAUSAL, True,
            )  # fmt: skip
        else:
            lo = 0
        dk, dv = _dkdv_blocks(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qs, stride_dos,
            offs_n, offs_d, seqlen_q, qk_scale, lo, full_end, BLOCK_M, CAUSAL, False,
        )  # fmt: skip
        dk, dv = _dkdv_blocks(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qs, stride_dos,
            offs_n, offs_d, seqlen_q, qk_scale, tl.maximum(full_end, lo), seqlen_q,
            BLOCK_M, CAUSAL, True,
        )  # fmt: skip
    dk_ptrs = DK + dk_off + offs_n[:, None] * stride_dks + offs_d[None, :]
    dv_ptrs = DV + dv_off + offs_n[:, None] * stride_dvs + offs_d[None, :]
    tl.store(dk_ptrs, (dk * scale).to(DK.dtype.element_ty), mask=cols)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=cols)


@triton.jit
def _dq_blocks(
    dq, q, do, lse2, delta, k_base, v_base, stride_ks, stride_vs,
    offs_m, offs_d, seqlen_k, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    offs_c = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_c
        k_ptrs = k_base + offs_n[:, None] * stride_ks + offs_d[None, :]
        v_ptrs = v_base + offs_n[:, None] * stride_vs + offs_d[None, :]
        if MASKED:
            cols = offs_n < seqlen_k
            k = tl.load(k_ptrs, mask=cols[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            keep = cols[None, :]
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(keep, qk, float("-inf"))
        p = tl.math.exp2(qk - lse2[:, None])
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def _xrt_attn_bwd_dq(
    Q, K, V, DO, LSE, DELTA, DQ, CU_Q, CU_K,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh,
    stride_lb, stride_lh,
    seqlen_q, seqlen_k, num_heads, group, qk_scale, scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
):  # fmt: skip
    """dQ of one query block (its own kernel, so no atomics are needed)."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    kvh = h // group
    q_off = b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_off = b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
    dq_off = b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
    lse_off = b.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh
    k_off = b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
    v_off = b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
    if VARLEN:
        q_start = tl.load(CU_Q + b)
        k_start = tl.load(CU_K + b)
        seqlen_q = tl.load(CU_Q + b + 1) - q_start
        seqlen_k = tl.load(CU_K + b + 1) - k_start
        q_off += q_start.to(tl.int64) * stride_qs
        do_off += q_start.to(tl.int64) * stride_dos
        dq_off += q_start.to(tl.int64) * stride_dqs
        lse_off += q_start.to(tl.int64)
        k_off += k_start.to(tl.int64) * stride_ks
        v_off += k_start.to(tl.int64) * stride_vs
    start_m = pid_m * BLOCK_M
    if start_m >= seqlen_q:
        return
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seqlen_q
    q = tl.load(
        Q + q_off + offs_m[:, None] * stride_qs + offs_d[None, :], mask=rows[:, None], other=0.0
    )
    do = tl.load(
        DO + do_off + offs_m[:, None] * stride_dos + offs_d[None, :], mask=rows[:, None], other=0.0
    )
    lse2 = tl.load(LSE + lse_off + offs_m, mask=rows, other=0.0) * LOG2E
    delta = tl.load(DELTA + lse_off + offs_m, mask=rows, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, seqlen_k)
        full_end = (tl.minimum(start_m + 1, seqlen_k) // BLOCK_N) * BLOCK_N
    else:
        hi = seqlen_k
        full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    dq = _dq_blocks(
        dq, q, do, lse2, delta, K + k_off, V + v_off, stride_ks, stride_vs,
        offs_m, offs_d, seqlen_k, qk_scale, 0, full_end, BLOCK_N, CAUSAL, False,
    )  # fmt: skip
    dq = _dq_blocks(
        dq, q, do, lse2, delta, K + k_off, V + v_off, stride_ks, stride_vs,
        offs_m, offs_d, seqlen_k, qk_scale, full_end, hi, BLOCK_N, CAUSAL, True,
    )  # fmt: skip
    dq_ptrs = DQ + dq_off + offs_m[:, None] * stride_dqs + offs_d[None, :]
    tl.store(dq_ptrs, (dq * scale).to(DQ.dtype.element_ty), mask=rows[:, None])
