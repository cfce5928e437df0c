"""The Hopper (sm_90a) backward of ``xrt_flash``, written in Gluon: FlashAttention-3's layout
of the work, either fused (dQ added into a float32 accumulator) or in two kernels without
atomics.

The kernels have the forward's shape (:mod:`._hopper_kernels`): one producer warp issues TMA
loads into ``NUM_STAGES``-deep shared-memory rings (a *ready* mbarrier per slot that the copy
engine completes, an *empty* one that both consumers arrive on once their wgmmas have read
the slot), two consumer warpgroups get the registers the producer gives up (``setmaxnreg``
through ``gl.warp_specialize``), every GEMM is an async ``warpgroup_mma``, and the
probabilities and their gradient stay in registers as the A operand of the GEMMs that
consume them (no shared-memory round trip).

- ``_xrt_attn_bwd_dkdv_hopper``: one CTA per 128 keys of one key/value head. Consumer ``w``
  owns key rows ``w * 64`` to ``+ 64``, keeps its K and V rows in shared memory and its dK
  and dV in registers, and streams the query and output-gradient tiles of every query head
  of its group (grouped-query attention sums dK and dV over the group here, so no atomics):
  Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ · qk_scale − lse₂), dV += Pᵀ dO, dPᵀ = V dOᵀ,
  dSᵀ = Pᵀ ∘ (dPᵀ · scale − delta), dK += dSᵀ Q (delta scaled, below). Causal: query
  blocks wholly before the key block are never loaded; only those that cross its diagonal
  are masked.
- ``_xrt_attn_bwd_dq_hopper``: one CTA per 128 query rows of one query head (64 per
  consumer), streaming key and value tiles: S = Q Kᵀ, dP = dO Vᵀ,
  dS = P ∘ (dP · scale − delta), dQ += dS K. Causal: key blocks past the query block are
  never loaded.

Recomputing S and dP for dQ costs two GEMMs more than FlashAttention-3's atomic dQ, and buys
deterministic results.

- ``_xrt_attn_bwd_fused_hopper``: the dK/dV kernel that also computes each query block's dQ
  contribution dS K from the dSᵀ it already has (5 GEMMs per block pair): dSᵀ goes to shared
  memory in 16 bits, where it is the MN-major A operand of dS K. By default (``SPLIT_COLS``)
  the two consumers write their 64 key rows of one [128 keys, 64 queries] tile (an mbarrier
  pair orders the writes and the reads of two such tiles) and each multiplies all of it by
  half of K's columns; the float32 product goes either through shared memory to the copy
  engine's reduce-add into the accumulator (``DQ_TMA``, :func:`_tma_reduce_add`) or straight
  from registers as ``red.global.add.v2.f32`` (:func:`_red_add`); with ``DQ_WRITER`` (the
  defaults) a writer warp issues the copy engine's reduce-adds of the products the
  consumers stage, and the steps take FlashAttention-3's order (:func:`_fused_step_writer`).
  The order of the additions is not fixed: dQ is not bitwise reproducible.
  ``_xrt_attn_bwd_dq_convert_hopper`` converts the accumulator into dQ.

Numerics follow :mod:`._kernels`: ``qk_scale = scale * log2(e)``, the forward's natural-log
log-sum-exp used as ``lse * log2(e)``, ``delta = rowsum(dO ∘ O)`` in float32, float32
accumulation, causal masking top-left aligned; but dS is scaled by ``scale`` before its
16-bit rounding, as cuDNN's errors show it does, where ``_kernels`` (like FlashAttention,
its peer off Hopper) rounds dS and scales dK and dQ at the end. It is computed as P ∘ (dP ·
scale − delta · scale), one fused multiply-add where the unscaled form had a subtraction.
Neither order is the more accurate (which one errs less depends on the data); where
``scale`` is a power of two (head size 64) they round alike, and at head size 128 this one
gave cuDNN's errors to three or four digits on the grid of docs/attention.md (S 2048-16384,
full and causal), where the other was up to 2.6 % above them with causal masking and 0.3 %
below without. A first small kernel (``_xrt_attn_bwd_prep_hopper``) writes ``lse * log2(e)``
and ``delta * scale`` into float32 (batch x heads, seqlen_pad) buffers padded to 128 rows,
so that the dK/dV producer can bring each query block's values in by TMA with its Q and dO
tiles (the consumers read them from shared memory when they need them, instead of holding 2
x 16 registers a thread through the GEMMs). Padded rows hold lse₂ = +inf and delta = 0:
their probabilities are exactly 0 (TMA also fills their Q and dO rows with zeros). Key rows
past ``seqlen_k`` are zeros too and their dK and dV rows are clipped by the TMA store.

Packed variable-length sequences (``VARLEN``; the prep, dK/dV and dQ kernels) run on 2-D
grids over the longest sequence's blocks, on (1, heads, total rows, head_dim) views of the
packed tensors. The prep kernel gives each sequence its own 128-row-aligned, padded stretch
of the lse₂ and delta buffers (``CU_PAD``), so that the rows a last query block reads past
its sequence (the next one's) weigh exactly 0 as a dense call's padding does, and so that
every lse₂/delta box starts 16-byte aligned, as TMA requires of a box's innermost
coordinate. Tiles that end past their sequence store their rows one by one.
"""

from __future__ import annotations

from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from xpuruntime.kernels.attention._hopper_kernels import (
    _box,
    _section_order,
    _sequence,
    _store_rows,
)

LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)
#: Rows of a tile that one consumer warpgroup owns (the wgmma M of four warps).
WG_ROWS: gl.constexpr = gl.constexpr(64)


@gluon.jit
def _release(bar):
    """Tell the producer that this warpgroup is done with a ring slot: every warp of the
    group meets first (each is past its wgmma wait), then one thread arrives. (The forward's
    helper of the same job is being reworked; this one stays the plain, safe form.)"""
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _block_and_head(num_blocks, batch_heads, section, LPT: gl.constexpr):
    """(block index, batch x head) of this CTA: its program ids on a 2-D grid, or with
    ``LPT`` its item of the 1-D order (:func:`._hopper_kernels._section_order`: block index
    0 of every head of an L2 section first; the kernels make index 0 their longest block)."""
    if LPT:
        block, bh = _section_order(gl.program_id(0), num_blocks, batch_heads, section)
    else:
        block = gl.program_id(0)
        bh = gl.program_id(1)
    return block, bh


# ---------------------------------------------------------------------------------------
# delta and lse * log2(e)


@gluon.jit
def _xrt_attn_bwd_prep_hopper(
    OUT, DO, LSE, LSE2, DELTA,
    stride_ob, stride_oh, stride_os, stride_dob, stride_doh, stride_dos,
    seqlen_q, seqlen_pad, num_heads, scale, CU_Q, CU_PAD,
    HEAD_DIM: gl.constexpr, BLOCK: gl.constexpr, VARLEN: gl.constexpr,
):  # fmt: skip
    """delta = scale · rowsum(dO ∘ O) and lse₂ = lse · log2(e) of BLOCK query rows, into
    float32 (batch x heads, seqlen_pad) buffers; rows past ``seqlen_q`` get delta 0 and lse₂
    +inf. (delta comes scaled so that the consumers' scaled dS = P ∘ (dP · scale − delta)
    costs a fused multiply-add where the unscaled one cost a subtraction.)
    ``LSE`` is the forward's contiguous (batch, heads, seqlen_q). Grid (seqlen_pad / BLOCK,
    batch x heads), num_warps=4.

    ``VARLEN``: packed sequences, batch ``b`` being query rows ``CU_Q[b]:CU_Q[b+1]`` of the
    (1, heads, total) views and of ``LSE``, (heads, total) (``seqlen_q`` is the total); each
    sequence gets rows ``CU_PAD[b]:CU_PAD[b+1]`` of the (heads, seqlen_pad) buffers, its
    length rounded up to 128 rows, so that its rows start where TMA can load them (the
    innermost coordinate must be 16-byte aligned) and its padding holds lse₂ = +inf and delta
    = 0 as a dense call's does. Grid (blocks of the longest padded sequence, sequences x
    heads)."""
    COL_THREADS: gl.constexpr = HEAD_DIM // 8
    layout: gl.constexpr = gl.BlockedLayout(
        [1, 8], [32 // COL_THREADS, COL_THREADS], [4, 1], [1, 0]
    )
    bh = gl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    if VARLEN:  # the views' one batch, the sequence's rows
        q_start = gl.load(CU_Q + b)
        len_q = gl.load(CU_Q + b + 1) - q_start
        pad_start = gl.load(CU_PAD + b)
        ours = rows < gl.load(CU_PAD + b + 1) - pad_start  # rows of this sequence's padding
        padded = h.to(gl.int64) * seqlen_pad + pad_start + rows
        o_ptrs = OUT + h.to(gl.int64) * stride_oh
        do_ptrs = DO + h.to(gl.int64) * stride_doh
        lse_ptrs = LSE + h.to(gl.int64) * seqlen_q
    else:
        q_start = 0
        len_q = seqlen_q
        padded = bh.to(gl.int64) * seqlen_pad + rows
        o_ptrs = OUT + (b.to(gl.int64) * stride_ob + h.to(gl.int64) * stride_oh)
        do_ptrs = DO + (b.to(gl.int64) * stride_dob + h.to(gl.int64) * stride_doh)
        lse_ptrs = LSE + bh.to(gl.int64) * seqlen_q
    inside = rows < len_q
    mask = gl.expand_dims(inside, 1) & gl.expand_dims(cols < HEAD_DIM, 0)
    first = q_start + rows.to(gl.int64)
    o_ptrs = o_ptrs + gl.expand_dims(first * stride_os, 1) + gl.expand_dims(cols, 0)
    do_ptrs = do_ptrs + gl.expand_dims(first * stride_dos, 1) + gl.expand_dims(cols, 0)
    o = gl.load(o_ptrs, mask=mask, other=0.0).to(gl.float32)
    do = gl.load(do_ptrs, mask=mask, other=0.0).to(gl.float32)
    delta = gl.sum(o * do, axis=1)
    lse = gl.load(lse_ptrs + first, mask=inside, other=float("inf"))
    if VARLEN:
        gl.store(DELTA + padded, delta * scale, mask=ours)
        gl.store(LSE2 + padded, lse * LOG2E, mask=ours)
    else:
        gl.store(DELTA + padded, delta * scale)
        gl.store(LSE2 + padded, lse * LOG2E)


# ---------------------------------------------------------------------------------------
# dK and dV


@gluon.jit
def _row(buf, n: gl.constexpr, layout: gl.constexpr):
    """A [1, n] float32 ring slot (a TMA box) read as a length-n vector in ``layout``."""
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    return buf._reinterpret(gl.float32, [n], flat).load(layout)


@gluon.jit
def _ring_s(k, q_smem, q_ready, it, s_init, NUM_STAGES: gl.constexpr):
    """Sᵀ = K Qᵀ of ring position ``it``, issued (asynchronously) once its query tile has
    landed."""
    slot = it % NUM_STAGES
    mbarrier.wait(q_ready.index(slot), (it // NUM_STAGES) & 1)
    return warpgroup_mma(
        k, q_smem.index(slot).permute((1, 0)), s_init, use_acc=False, is_async=True
    )


@gluon.jit
def _first_s(k, q_smem, q_ready, n_total, s_init, NUM_STAGES: gl.constexpr):
    """The first step's Sᵀ for overlapped steps (``s_init`` when there is no step)."""
    s = s_init
    if n_total > 0:
        s_tok = _ring_s(k, q_smem, q_ready, 0, s_init, NUM_STAGES)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
    return s


@gluon.jit
def _next_s(k, q_smem, q_ready, it, n_total, s_init, NUM_STAGES: gl.constexpr):
    """The next step's Sᵀ, issued by overlapped step ``it``. The last step recomputes its own
    (its slot is still held): a branch around the GEMM made ptxas copy the accumulators and
    spill (336 bytes at head size 128)."""
    return _ring_s(k, q_smem, q_ready, gl.minimum(it + 1, n_total - 1), s_init, NUM_STAGES)


@gluon.jit
def _dkdv_step(
    it, n_total, m, k, v, q_smem, do_smem, lse_smem, delta_smem, q_ready, do_ready, empty,
    dk, dv, s, s_init, row0, qk_scale, scale,
    BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
    OVERLAP: gl.constexpr,
):  # fmt: skip
    """Ring slot ``it`` (query block ``m`` of some query head) against this warpgroup's 64
    keys from ``row0``; returns (dk, dv, s).

    With ``OVERLAP``, ``s`` is this step's Sᵀ, computed by the step before (or the loop's
    prologue), and the step issues the next one's Sᵀ = K Qᵀ behind its dK GEMM, so that the
    tensor cores run it while this warpgroup waits for dK anyway, instead of after the step
    boundary (release, ring wait, issue). Every GEMM still completes inside the step: a
    wgmma in flight across a loop's back edge would make ptxas serialise them. Without it,
    ``s`` is unused and the step computes its own Sᵀ first."""
    s_layout: gl.constexpr = s_init.type.layout
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk.type.layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = it % NUM_STAGES
    phase = (it // NUM_STAGES) & 1
    q = q_smem.index(slot)
    do = do_smem.index(slot)
    if not OVERLAP:
        s_tok = _ring_s(k, q_smem, q_ready, it, s_init, NUM_STAGES)
    mbarrier.wait(do_ready.index(slot), phase)
    dp_tok = warpgroup_mma(v, do.permute((1, 0)), s_init, use_acc=False, is_async=True)
    lse2 = _row(lse_smem.index(slot), BLOCK_M, cols_layout)
    if not OVERLAP:
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
    qk = s * qk_scale
    if CAUSAL:
        # Query m sees key n only if m >= n: a block whose first query is at least 64 past
        # this warpgroup's first key needs no mask (query blocks start on or past row0 - 64).
        offset = m * BLOCK_M - row0
        if offset < WG_ROWS:
            cols = offset + gl.arange(0, BLOCK_M, layout=cols_layout)
            keys = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, s_layout))
            keep = gl.expand_dims(cols, 0) >= gl.expand_dims(keys, 1)
            qk = gl.where(keep, qk, float("-inf"))
    p = gl.exp2(qk - gl.expand_dims(lse2, 0))
    # dV += Pᵀ dO runs while dPᵀ lands and dSᵀ is computed.
    p_a = gl.convert_layout(p.to(q.dtype), a_layout)
    dv_tok = warpgroup_mma(p_a, do, dv, is_async=True)
    delta = _row(delta_smem.index(slot), BLOCK_M, cols_layout)
    dp = warpgroup_mma_wait(num_outstanding=1, deps=(dp_tok,))
    ds = p * (dp * scale - gl.expand_dims(delta, 0))
    ds_a = gl.convert_layout(ds.to(q.dtype), a_layout)
    dk_tok = warpgroup_mma(ds_a, q, dk, is_async=True)
    if OVERLAP:
        s_tok = _next_s(k, q_smem, q_ready, it, n_total, s_init, NUM_STAGES)
        dv, dk, s = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, s_tok))
    else:
        dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok))
    _release(empty.index(slot))
    return dk, dv, s


@gluon.jit
def _dkdv_consumer(
    k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready, do_ready, empty,
    dk_desc, dv_desc, num_kv_heads, bh, start_n, group, m_lo, n_m, qk_scale, scale,
    DK, DV, stride_ks, stride_kh, CU_Q, CU_K,
    WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
    VARLEN: gl.constexpr,
):  # fmt: skip
    """Consumer warpgroup ``WG``: dK and dV of key rows ``start_n + WG * 64`` to ``+ 64``
    (``OVERLAP``: see :func:`_dkdv_step`). ``VARLEN``: of sequence ``bh // num_kv_heads``;
    ``DK``, ``DV`` and their (row, head) strides take the rows of a tile that runs past its
    keys."""
    dtype: gl.constexpr = q_smem.dtype
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16]
    )
    mma_kv: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    row0 = start_n + WG * WG_ROWS
    dk = gl.zeros([WG_ROWS, HEAD_DIM], gl.float32, layout=mma_kv)
    dv = gl.zeros([WG_ROWS, HEAD_DIM], gl.float32, layout=mma_kv)
    s_init = gl.zeros([WG_ROWS, BLOCK_M], gl.float32, layout=mma_s)
    k = k_smem.index(WG)
    v = v_smem.index(WG)
    mbarrier.wait(kv_bars.index(WG), 0)
    # One flat loop over (query head of the group, query block), in the producer's order: one
    # loop keeps fewer values live across loop boundaries than a nest (no spill in the loop
    # at 128; causal, ptxas stores one 4-byte value once, outside it: STL/LDL in the SASS).
    n_iter = n_m - m_lo
    n_total = group * n_iter
    s = _first_s(k, q_smem, q_ready, n_total, s_init, NUM_STAGES) if OVERLAP else s_init
    for it in range(n_total):
        m = m_lo + it % n_iter
        dk, dv, s = _dkdv_step(
            it, n_total, m, k, v, q_smem, do_smem, lse_smem, delta_smem, q_ready, do_ready,
            empty, dk, dv, s, s_init, row0, qk_scale, scale, BLOCK_M, NUM_STAGES, CAUSAL,
            OVERLAP,
        )  # fmt: skip
    # This warpgroup's K and V rows are free now (its last wgmma completed): stage the
    # gradients there. Rows past seqlen_k are clipped by the store. The coordinates are
    # computed here rather than kept live through the loop (registers are that tight).
    b = bh // num_kv_heads
    kv_h = bh % num_kv_heads
    if VARLEN:
        # The packed descriptors span every sequence: the rows past this one's keys are the
        # next sequence's, so a tile that runs past them is stored row by row (a tile wholly
        # past them, of a shorter sequence than the grid's longest, stores nothing). The
        # offsets are read again here rather than kept live through the loop.
        _q_start, k_start, _len_q, len_k = _sequence(CU_Q, CU_K, b, 0, 0, True)
        v.store(dv.to(dtype))
        k.store(dk.to(dtype))
        if row0 + WG_ROWS <= len_k:
            fence_async_shared()
            tma.async_copy_shared_to_global(dv_desc, [0, kv_h, k_start + row0, 0], _box(v, dv_desc))
            tma.async_copy_shared_to_global(dk_desc, [0, kv_h, k_start + row0, 0], _box(k, dk_desc))
        else:
            rows = len_k - row0
            _store_rows(v, DV, k_start + row0, rows, kv_h, stride_ks, stride_kh, WG_ROWS, HEAD_DIM)
            _store_rows(k, DK, k_start + row0, rows, kv_h, stride_ks, stride_kh, WG_ROWS, HEAD_DIM)
    else:
        v.store(dv.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dv_desc, [b, kv_h, row0, 0], _box(v, dv_desc))
        k.store(dk.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dk_desc, [b, kv_h, row0, 0], _box(k, dk_desc))
    tma.store_wait(pendings=0)


@gluon.jit
def _dkdv_producer(
    q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc,
    k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready, do_ready, empty,
    b, kv_h, start_n, num_heads, group, m_lo, n_m, q_start, k_start, lse_start,
    BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr,
):  # fmt: skip
    """The load warp: each consumer's K and V rows, then the Q and dO tiles (with their
    lse₂ and delta rows) through the ring in the consumers' order: query heads of the
    group, then query blocks. Packed sequences: ``b`` is 0 (the descriptors' one batch), the
    sequence's rows start at packed rows ``q_start`` and ``k_start`` and its lse₂ and delta
    at ``lse_start``."""
    for w in gl.static_range(2):
        bar = kv_bars.index(w)
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        row = k_start + start_n + w * WG_ROWS
        tma.async_copy_global_to_shared(
            k_desc, [b, kv_h, row, 0], bar, _box(k_smem.index(w), k_desc)
        )
        tma.async_copy_global_to_shared(
            v_desc, [b, kv_h, row, 0], bar, _box(v_smem.index(w), v_desc)
        )
    n_iter = n_m - m_lo
    for it in range(group * n_iter):
        h = kv_h * group + it // n_iter
        bh = b * num_heads + h
        row = (m_lo + it % n_iter) * BLOCK_M
        slot = it % NUM_STAGES
        phase = (it // NUM_STAGES) & 1
        # A fresh "empty" barrier counts as completed for parity 1: the first pass is free.
        mbarrier.wait(empty.index(slot), phase ^ 1)
        bar = q_ready.index(slot)
        mbarrier.expect(bar, q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            q_desc, [b, h, q_start + row, 0], bar, _box(q_smem.index(slot), q_desc)
        )
        # (The row is these boxes' innermost coordinate: TMA needs it 16-byte aligned, which
        # the padded buffers' 128-row sequence starts give.)
        tma.async_copy_global_to_shared(lse_desc, [bh, lse_start + row], bar, lse_smem.index(slot))
        bar = do_ready.index(slot)
        mbarrier.expect(bar, do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            do_desc, [b, h, q_start + row, 0], bar, _box(do_smem.index(slot), do_desc)
        )
        tma.async_copy_global_to_shared(
            delta_desc, [bh, lse_start + row], bar, delta_smem.index(slot)
        )


@gluon.jit
def _xrt_attn_bwd_dkdv_hopper(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc,
    seqlen_q, num_kv_heads, group, qk_scale, scale, num_key_blocks, batch_kv_heads, section,
    DK, DV, stride_ks, stride_kh, CU_Q, CU_K, CU_PAD,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, LPT: gl.constexpr, OVERLAP: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, VARLEN: gl.constexpr,
):  # fmt: skip
    """One CTA per (128 keys, batch x key/value head); launch with num_warps=4 (consumer 0;
    consumer 1 and the producer warp are worker partitions). Boxes: Q and dO BLOCK_M rows,
    K, V, dK and dV 64 rows, lse₂ and delta ``[1, BLOCK_M]`` of the prep kernel's padded
    (batch x heads, seqlen_pad) buffers. A 2-D grid (key blocks, batch x key/value heads),
    or with ``LPT`` a 1-D one of ``num_key_blocks * batch_kv_heads`` CTAs in L2 sections of
    ``section`` heads, key block 0 (causal: the most query blocks) first
    (:func:`_block_and_head`).

    ``VARLEN``: packed sequences on the 2-D grid (key blocks of the longest sequence,
    sequences x key/value heads); the descriptors are over (1, heads, total rows, head_dim)
    views of the packed rows, sequence ``i`` being rows ``CU_Q[i]:CU_Q[i+1]`` and
    ``CU_K[i]:CU_K[i+1]``; lse₂ and delta are (heads, padded total) buffers, sequence ``i``
    from row ``CU_PAD[i]`` (:func:`_xrt_attn_bwd_prep_hopper`); ``DK``, ``DV``,
    ``stride_ks`` and ``stride_kh`` address the gradients' rows for tiles that end past
    their sequence's keys."""
    BLOCK_N: gl.constexpr = 2 * WG_ROWS
    gl.static_assert(BLOCK_N % BLOCK_M == 0)  # the diagonal's query blocks tile the key block
    dtype: gl.constexpr = q_desc.dtype
    pid_n, bh = _block_and_head(num_key_blocks, batch_kv_heads, section, LPT)
    b = bh // num_kv_heads
    kv_h = bh % num_kv_heads
    start_n = pid_n * BLOCK_N
    q_start, k_start, len_q, len_k = _sequence(CU_Q, CU_K, b, seqlen_q, 0, VARLEN)
    n_m = gl.cdiv(len_q, BLOCK_M)
    if VARLEN:
        n_m = gl.where(start_n < len_k, n_m, 0)  # a key block of a longer sequence: no step
        lse_start = gl.load(CU_PAD + b)
        b = 0  # the descriptors' one batch
    else:
        lse_start = 0
    # Causal: query blocks before the key block see none of it.
    m_lo = gl.minimum(start_n // BLOCK_M, n_m) if CAUSAL else 0

    tile_q: gl.constexpr = gl.NVMMASharedLayout(q_desc.layout.swizzle_byte_width, 16)
    tile_kv: gl.constexpr = gl.NVMMASharedLayout(k_desc.layout.swizzle_byte_width, 16)
    k_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_kv)
    v_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_kv)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], tile_q)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], tile_q)
    lse_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, 1, BLOCK_M], lse_desc.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, 1, BLOCK_M], lse_desc.layout)
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    kv_bars = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    for i in gl.static_range(2):
        mbarrier.init(kv_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrive per consumer warpgroup

    # The argument tuples are written inline: a tuple bound to a name first would wrap its
    # constexprs twice (as in the forward).
    # fmt: off
    gl.warp_specialize(
        [
            (_dkdv_consumer, (
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready,
                do_ready, empty, dk_desc, dv_desc, num_kv_heads, bh, start_n, group, m_lo,
                n_m, qk_scale, scale, DK, DV, stride_ks, stride_kh, CU_Q, CU_K,
                0, HEAD_DIM, BLOCK_M, NUM_STAGES, CAUSAL, OVERLAP, VARLEN,
            )),
            (_dkdv_consumer, (
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready,
                do_ready, empty, dk_desc, dv_desc, num_kv_heads, bh, start_n, group, m_lo,
                n_m, qk_scale, scale, DK, DV, stride_ks, stride_kh, CU_Q, CU_K,
                1, HEAD_DIM, BLOCK_M, NUM_STAGES, CAUSAL, OVERLAP, VARLEN,
            )),
            (_dkdv_producer, (
                q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc,
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready,
                do_ready, empty, b, kv_h, start_n, num_kv_heads * group, group, m_lo, n_m,
                q_start, k_start, lse_start, BLOCK_M, NUM_STAGES,
            )),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )
    # fmt: on


# ---------------------------------------------------------------------------------------
# dQ


@gluon.jit
def _dq_blocks(
    lo, hi, q, do, k_smem, v_smem, k_ready, v_ready, empty, dq, lse2, delta, rows,
    seqlen_k, qk_scale, scale,
    BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
):  # fmt: skip
    """Key blocks ``lo`` to ``hi`` against this warpgroup's 64 query rows."""
    s_layout: gl.constexpr = rows.type.layout.parent
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq.type.layout, k_width=2)
    s_init = gl.zeros([WG_ROWS, BLOCK_N], gl.float32, layout=s_layout)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    for j in range(lo, hi):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        k = k_smem.index(slot)
        v = v_smem.index(slot)
        mbarrier.wait(k_ready.index(slot), phase)
        s_tok = warpgroup_mma(q, k.permute((1, 0)), s_init, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(slot), phase)
        dp_tok = warpgroup_mma(do, v.permute((1, 0)), s_init, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        qk = s * qk_scale
        if MASKED:  # the causal diagonal or the sequence end
            cols = j * BLOCK_N + offs_n
            keep = gl.expand_dims(cols, 0) < seqlen_k
            if CAUSAL:
                keep = keep & (gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0))
            qk = gl.where(keep, qk, float("-inf"))
        p = gl.exp2(qk - gl.expand_dims(lse2, 1))
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
        ds = p * (dp * scale - gl.expand_dims(delta, 1))
        ds_a = gl.convert_layout(ds.to(q.dtype), a_layout)
        dq_tok = warpgroup_mma(ds_a, k, dq, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok,))
        _release(empty.index(slot))
    return dq


@gluon.jit
def _dq_consumer(
    q_smem, do_smem, k_smem, v_smem, q_bars, k_ready, v_ready, empty,
    dq_desc, LSE2, DELTA, b, h, bh, start_m, seqlen_pad, seqlen_k, n_full, n_blocks,
    qk_scale, scale, DQ, stride_qs, stride_qh, q_start, len_q, lse_start,
    WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, VARLEN: gl.constexpr,
):  # fmt: skip
    """Consumer warpgroup ``WG``: dQ of query rows ``start_m + WG * 64`` to ``+ 64``.
    ``VARLEN``: of the sequence whose queries start at packed row ``q_start`` (``len_q`` of
    them; ``b`` is 0, ``bh`` the head, and its lse₂ and delta start at ``lse_start``); ``DQ``
    and its strides take the rows of a tile that runs past them."""
    dtype: gl.constexpr = q_smem.dtype
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_dq: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    row0 = start_m + WG * WG_ROWS
    rows = row0 + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, mma_s))
    padded = bh.to(gl.int64) * seqlen_pad + lse_start + rows
    if VARLEN:
        # Rows of the sequence's padded stretch hold +inf and 0 already; a CTA past the
        # sequence's end (a shorter one than the grid's longest) reads nothing.
        inside = rows < len_q
        lse2 = gl.load(LSE2 + padded, mask=inside, other=float("inf"))
        delta = gl.load(DELTA + padded, mask=inside, other=0.0)
    else:  # inside the padded buffers
        lse2 = gl.load(LSE2 + padded)
        delta = gl.load(DELTA + padded)
    dq = gl.zeros([WG_ROWS, HEAD_DIM], gl.float32, layout=mma_dq)
    q = q_smem.index(WG)
    do = do_smem.index(WG)
    mbarrier.wait(q_bars.index(WG), 0)
    dq = _dq_blocks(
        0, n_full, q, do, k_smem, v_smem, k_ready, v_ready, empty, dq, lse2, delta, rows,
        seqlen_k, qk_scale, scale, BLOCK_N, NUM_STAGES, CAUSAL, False,
    )  # fmt: skip
    dq = _dq_blocks(
        n_full, n_blocks, q, do, k_smem, v_smem, k_ready, v_ready, empty, dq, lse2, delta, rows,
        seqlen_k, qk_scale, scale, BLOCK_N, NUM_STAGES, CAUSAL, True,
    )  # fmt: skip
    # The query tile is free now (its last wgmma completed): stage dQ there.
    q.store(dq.to(dtype))
    if VARLEN:  # as the dK/dV kernel's stores: a tile past the sequence's end row by row
        whole = row0 + WG_ROWS <= len_q
    else:
        whole: gl.constexpr = True
    if whole:
        fence_async_shared()
        tma.async_copy_shared_to_global(dq_desc, [b, h, q_start + row0, 0], _box(q, dq_desc))
    else:
        _store_rows(q, DQ, q_start + row0, len_q - row0, h, stride_qs, stride_qh, WG_ROWS, HEAD_DIM)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_producer(
    q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
    q_bars, k_ready, v_ready, empty, b, h, kv_h, start_m, n_blocks, q_start, k_start,
    BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
):  # fmt: skip
    """The load warp: both consumers' Q and dO rows, then key and value tiles through the
    ring (packed sequences: from packed rows ``q_start`` and ``k_start``)."""
    for w in gl.static_range(2):
        bar = q_bars.index(w)
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        row = q_start + start_m + w * WG_ROWS
        tma.async_copy_global_to_shared(q_desc, [b, h, row, 0], bar, _box(q_smem.index(w), q_desc))
        tma.async_copy_global_to_shared(
            do_desc, [b, h, row, 0], bar, _box(do_smem.index(w), do_desc)
        )
    for j in range(n_blocks):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        # A fresh "empty" barrier counts as completed for parity 1: the first pass is free.
        mbarrier.wait(empty.index(slot), phase ^ 1)
        row = k_start + j * BLOCK_N
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            k_desc, [b, kv_h, row, 0], k_ready.index(slot), _box(k_smem.index(slot), k_desc)
        )
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            v_desc, [b, kv_h, row, 0], v_ready.index(slot), _box(v_smem.index(slot), v_desc)
        )


@gluon.jit
def _xrt_attn_bwd_dq_hopper(
    q_desc, k_desc, v_desc, do_desc, dq_desc, LSE2, DELTA,
    seqlen_pad, seqlen_k, num_heads, group, qk_scale, scale, batch_heads, section,
    DQ, stride_qs, stride_qh, CU_Q, CU_K, CU_PAD,
    HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, LPT: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr, VARLEN: gl.constexpr,
):  # fmt: skip
    """One CTA per (128 query rows, batch x query head); launch with num_warps=4.
    ``seqlen_k`` must be positive. The query/output-gradient/dQ boxes are 64 rows, the
    key/value boxes BLOCK_N; ``LSE2`` and ``DELTA`` are the prep kernel's padded
    (batch x heads, seqlen_pad) buffers (query rows past seqlen_q: lse₂ = +inf, so P = 0).
    A 2-D grid (query blocks, batch x heads), or with ``LPT`` a 1-D one of the same CTAs in
    L2 sections of ``section`` heads (:func:`_block_and_head`).

    ``VARLEN``: packed sequences on the 2-D grid (query blocks of the longest sequence,
    sequences x heads), as the dK/dV kernel's; ``LSE2`` and ``DELTA`` are (heads,
    ``seqlen_pad``) buffers, sequence ``i`` from row ``CU_PAD[i]``, and ``DQ``,
    ``stride_qs`` and ``stride_qh`` address dQ's rows for tiles that end past their
    sequence."""
    BLOCK_M: gl.constexpr = 2 * WG_ROWS
    dtype: gl.constexpr = q_desc.dtype
    num_m = gl.num_programs(0) if VARLEN else seqlen_pad // BLOCK_M
    pid_m, bh = _block_and_head(num_m, batch_heads, section, LPT)
    if CAUSAL:
        pid_m = num_m - 1 - pid_m  # the longest rows start first
    b = bh // num_heads
    h = bh % num_heads
    kv_h = h // group
    start_m = pid_m * BLOCK_M
    # (Dense, len_q is not used: the padded buffers' +inf rows stand for the rows past it.)
    q_start, k_start, len_q, len_k = _sequence(CU_Q, CU_K, b, 0, seqlen_k, VARLEN)
    if CAUSAL:
        hi = gl.minimum(start_m + BLOCK_M, len_k)
        n_full = gl.minimum(start_m + 1, len_k) // BLOCK_N
    else:
        hi = len_k
        n_full = len_k // BLOCK_N
    n_blocks = gl.cdiv(hi, BLOCK_N)
    if VARLEN:
        # A query block of a longer sequence only: no key block (and nothing stored).
        n_blocks = gl.where(start_m < len_q, n_blocks, 0)
        n_full = gl.minimum(n_full, n_blocks)
        lse_start = gl.load(CU_PAD + b)
        b = 0  # the descriptors' one batch
        bh = h  # the row of the lse₂ and delta buffers
    else:
        lse_start = 0

    tile_q: gl.constexpr = gl.NVMMASharedLayout(q_desc.layout.swizzle_byte_width, 16)
    tile_kv: gl.constexpr = gl.NVMMASharedLayout(k_desc.layout.swizzle_byte_width, 16)
    q_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_q)
    do_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_q)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], tile_kv)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], tile_kv)
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrive per consumer warpgroup

    # fmt: off
    gl.warp_specialize(
        [
            (_dq_consumer, (
                q_smem, do_smem, k_smem, v_smem, q_bars, k_ready, v_ready, empty,
                dq_desc, LSE2, DELTA, b, h, bh, start_m, seqlen_pad, len_k, n_full, n_blocks,
                qk_scale, scale, DQ, stride_qs, stride_qh, q_start, len_q, lse_start,
                0, HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, VARLEN,
            )),
            (_dq_consumer, (
                q_smem, do_smem, k_smem, v_smem, q_bars, k_ready, v_ready, empty,
                dq_desc, LSE2, DELTA, b, h, bh, start_m, seqlen_pad, len_k, n_full, n_blocks,
                qk_scale, scale, DQ, stride_qs, stride_qh, q_start, len_q, lse_start,
                1, HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, VARLEN,
            )),
            (_dq_producer, (
                q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                q_bars, k_ready, v_ready, empty, b, h, kv_h, start_m, n_blocks, q_start,
                k_start, BLOCK_N, NUM_STAGES,
            )),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )
    # fmt: on


# ---------------------------------------------------------------------------------------
# Fused dK, dV and dQ (float32 atomics)


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """``global[box at coord] += src`` by the copy engine (``cp.reduce.async.bulk.tensor``
    ``.add``), committed like a TMA store: :func:`tma.store_wait` waits for it to have read
    ``src``. Triton 3.6 builds the op but Gluon's ``tma`` module exports no wrapper for it;
    this is ``tma.async_copy_shared_to_global`` with the reduce op."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(
        ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle
    )


@gluon.jit
def _red_add(ptrs, values):
    """``*ptrs += values`` (float32), two neighbouring elements per ``red.global.add.v2.f32``.
    A thread's wgmma accumulator holds its columns in pairs (an even one, then the next), so
    each pair is one 8-byte reduction: half the instructions of Triton's own atomic_add,
    which is scalar and returns the old values. The result is a dummy (the asm has none)."""
    gl.inline_asm_elementwise(
        "red.global.add.v2.f32 [$2], {$4, $5};\n\tmov.b32 $0, 0;\n\tmov.b32 $1, 0;",
        "=r,=r,l,l,f,f",
        [ptrs.to(gl.int64, bitcast=True), values],
        dtype=gl.int32,
        is_pure=False,
        pack=2,
    )


@gluon.jit
def _fused_step(
    it, m, dq_block, dq_row, dq_desc, dq_smem, k, v, k_smem, q_smem, do_smem, lse_smem,
    delta_smem, ds_smem, q_ready, do_ready, empty, ds_ready, ds_free, dq_full, dq_empty, dk, dv,
    s, s_init, dq_init, row0, qk_scale, scale, n_total,
    WG: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
    SPLIT_COLS: gl.constexpr, DQ_TMA: gl.constexpr, OVERLAP: gl.constexpr,
    DQ_WRITER: gl.constexpr,
):  # fmt: skip
    """:func:`_dkdv_step`, plus this query block's dQ contribution: dSᵀ goes to shared
    memory (the MN-major A operand of dS K) and the float32 product is added with vector
    reductions (:func:`_red_add`) into ``dq_block``, this step's [BLOCK_M, HEAD_DIM] block of
    the accumulator. Returns (dk, dv, s); ``OVERLAP`` (with ``DQ_TMA``) as
    :func:`_dkdv_step`'s, the next step's Sᵀ issued behind this step's (first 32 columns'
    of) dQ GEMMs. ``DQ_WRITER``: past the probabilities the step is
    :func:`_fused_step_writer`'s."""
    s_layout: gl.constexpr = s_init.type.layout
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk.type.layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = it % NUM_STAGES
    phase = (it // NUM_STAGES) & 1
    q = q_smem.index(slot)
    do = do_smem.index(slot)
    if not OVERLAP:
        s_tok = _ring_s(k, q_smem, q_ready, it, s_init, NUM_STAGES)
    mbarrier.wait(do_ready.index(slot), phase)
    dp_tok = warpgroup_mma(v, do.permute((1, 0)), s_init, use_acc=False, is_async=True)
    lse2 = _row(lse_smem.index(slot), BLOCK_M, cols_layout)
    if not OVERLAP:
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
    qk = s * qk_scale
    if CAUSAL:
        offset = m * BLOCK_M - row0
        if offset < WG_ROWS:
            cols = offset + gl.arange(0, BLOCK_M, layout=cols_layout)
            keys = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, s_layout))
            keep = gl.expand_dims(cols, 0) >= gl.expand_dims(keys, 1)
            qk = gl.where(keep, qk, float("-inf"))
    p = gl.exp2(qk - gl.expand_dims(lse2, 0))
    if DQ_WRITER:
        return _fused_step_writer(
            it, p, dp_tok, do, q, k, q_smem, q_ready, k_smem, delta_smem, ds_smem, ds_ready,
            dq_smem, dq_full, dq_empty, empty, dk, dv, s, s_init, dq_init, scale, n_total,
            cols_layout, a_layout, WG, BLOCK_M, NUM_STAGES, OVERLAP,
        )  # fmt: skip
    # Unlike _dkdv_step, dV's GEMM waits for dPᵀ: Pᵀ in float32 dies before its 16-bit copy
    # is made, and the dQ product's registers fit (issued first, the loop spills at 128).
    delta = _row(delta_smem.index(slot), BLOCK_M, cols_layout)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
    ds = (p * (dp * scale - gl.expand_dims(delta, 0))).to(q.dtype)
    p_a = gl.convert_layout(p.to(q.dtype), a_layout)
    dv_tok = warpgroup_mma(p_a, do, dv, is_async=True)
    ds_a = gl.convert_layout(ds, a_layout)
    dk_tok = warpgroup_mma(ds_a, q, dk, is_async=True)
    if SPLIT_COLS:
        # Both warpgroups' dSᵀ rows make one [128 keys, BLOCK_M] tile; each warpgroup
        # multiplies all of it by its half of K's columns. Double-buffered: a buffer is
        # rewritten two steps on, once both warpgroups' dQ GEMMs have read it.
        buf = it % 2
        use = (it // 2) & 1
        tile = ds_smem.index(buf)
        mbarrier.wait(ds_free.index(buf), use ^ 1)
        tile.slice(WG * WG_ROWS, WG_ROWS).store(ds)
        fence_async_shared()
        _release(ds_ready.index(buf))
        mbarrier.wait(ds_ready.index(buf), use)
        lo = tile.slice(0, WG_ROWS).permute((1, 0))
        hi = tile.slice(WG_ROWS, WG_ROWS).permute((1, 0))
        if DQ_TMA:
            # 32 columns a GEMM (a [64, 32] float32 tile is one 128-byte-swizzled TMA box),
            # staged in shared memory and added to the accumulator by the copy engine. At
            # head size 128 the second 32 columns are multiplied once the first are staged:
            # two float32 products live at once spill at 240 registers.
            HALF: gl.constexpr = k_smem.shape[2] // 2
            c0: gl.constexpr = WG * HALF
            own: gl.constexpr = WG * (HALF // 32)  # this warpgroup's first staging tile
            t0 = warpgroup_mma(
                lo, k_smem.index(0).slice(c0, 32, dim=1), dq_init, use_acc=False, is_async=True
            )
            t0 = warpgroup_mma(hi, k_smem.index(1).slice(c0, 32, dim=1), t0, is_async=True)
            if OVERLAP:
                s_tok = _next_s(k, q_smem, q_ready, it, n_total, s_init, NUM_STAGES)
                dv, dk, dq0, s = warpgroup_mma_wait(
                    num_outstanding=0, deps=(dv_tok, dk_tok, t0, s_tok)
                )
            else:
                dv, dk, dq0 = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, t0))
            # The previous step's reductions have read this warpgroup's staging tiles (the
            # thread that issued them waits; the barrier in _release holds the others).
            tma.store_wait(pendings=0)
            _release(empty.index(slot))
            dq_smem.index(own).store(dq0)
            if HALF == 64:
                t1 = warpgroup_mma(
                    lo, k_smem.index(0).slice(c0 + 32, 32, dim=1), dq_init, use_acc=False,
                    is_async=True,
                )  # fmt: skip
                t1 = warpgroup_mma(hi, k_smem.index(1).slice(c0 + 32, 32, dim=1), t1, is_async=True)
                dq1 = warpgroup_mma_wait(num_outstanding=0, deps=(t1,))
                dq_smem.index(own + 1).store(dq1)
            _release(ds_free.index(buf))
            fence_async_shared()
            gl.thread_barrier()
            _tma_reduce_add(dq_desc, [dq_row, c0], dq_smem.index(own))
            if HALF == 64:
                _tma_reduce_add(dq_desc, [dq_row, c0 + 32], dq_smem.index(own + 1))
            return dk, dv, s
        half: gl.constexpr = dq_init.type.shape[1]
        dq_tok = warpgroup_mma(
            lo, k_smem.index(0).slice(WG * half, half, dim=1), dq_init, use_acc=False,
            is_async=True,
        )  # fmt: skip
        dq_tok = warpgroup_mma(hi, k_smem.index(1).slice(WG * half, half, dim=1), dq_tok,
                               is_async=True)  # fmt: skip
    else:
        # This warpgroup's own 64 keys: dQ_partial = dS[:, own keys] K[own keys].
        tile = ds_smem.index(WG)
        tile.store(ds)
        fence_async_shared()
        gl.thread_barrier()
        dq_tok = warpgroup_mma(tile.permute((1, 0)), k, dq_init, use_acc=False, is_async=True)
    dv, dk, dq = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, dq_tok))
    if SPLIT_COLS:
        _release(ds_free.index(buf))
    _release(empty.index(slot))
    # The offsets are built here, after the GEMMs: held through the loop they would cost a
    # register per element.
    dq_layout: gl.constexpr = dq_init.type.layout
    DQ_N: gl.constexpr = dq_init.type.shape[1]
    HEAD_DIM: gl.constexpr = dk.type.shape[1]
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
    cols = gl.arange(0, DQ_N, layout=gl.SliceLayout(0, dq_layout))
    if SPLIT_COLS:
        cols += WG * DQ_N
    ptrs = dq_block + gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    _red_add(ptrs, dq)
    return dk, dv, s


@gluon.jit
def _fused_step_writer(
    it, p, dp_tok, do, q, k, q_smem, q_ready, k_smem, delta_smem, ds_smem, ds_ready, dq_smem,
    dq_full, dq_empty, empty, dk, dv, s, s_init, dq_init, scale, n_total,
    cols_layout: gl.constexpr, a_layout: gl.constexpr,
    WG: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr, OVERLAP: gl.constexpr,
):  # fmt: skip
    """The rest of a :func:`_fused_step` whose dQ products a writer warp adds
    (:func:`_dq_writer`), in FlashAttention-3's order: dSᵀ to shared memory, dV issued, the
    two warpgroups meet, this warpgroup's dQ products issued, dK issued behind them; once
    the dQ products are done (dV with them) they are staged for the writer, and the step
    ends when dK is. ``OVERLAP``: the next step's Sᵀ is issued behind dK and runs while the
    products are staged (as :func:`_dkdv_step`'s). Returns (dk, dv, s)."""
    slot = it % NUM_STAGES
    delta = _row(delta_smem.index(slot), BLOCK_M, cols_layout)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
    ds = (p * (dp * scale - gl.expand_dims(delta, 0))).to(q.dtype)
    p_a = gl.convert_layout(p.to(q.dtype), a_layout)
    # No ds_free here: a warpgroup rewrites this buffer two steps on, after the meeting of
    # the next step, which the other warpgroup reaches only once this step's dQ GEMMs (the
    # buffer's readers) are done (FlashAttention-3's argument for one barrier a step).
    buf = it % 2
    use = (it // 2) & 1
    tile = ds_smem.index(buf)
    tile.slice(WG * WG_ROWS, WG_ROWS).store(ds)
    dv_tok = warpgroup_mma(p_a, do, dv, is_async=True)
    fence_async_shared()
    _release(ds_ready.index(buf))
    mbarrier.wait(ds_ready.index(buf), use)
    lo = tile.slice(0, WG_ROWS).permute((1, 0))
    hi = tile.slice(WG_ROWS, WG_ROWS).permute((1, 0))
    # This warpgroup's half of K's columns, in 32-column products (one [64, 32] float32 TMA
    # box each, 128-byte swizzled).
    HALF: gl.constexpr = k_smem.shape[2] // 2
    CHUNKS: gl.constexpr = HALF // 32
    c0: gl.constexpr = WG * HALF
    t0 = warpgroup_mma(
        lo, k_smem.index(0).slice(c0, 32, dim=1), dq_init, use_acc=False, is_async=True
    )
    t0 = warpgroup_mma(hi, k_smem.index(1).slice(c0, 32, dim=1), t0, is_async=True)
    if CHUNKS == 2:
        t1 = warpgroup_mma(
            lo, k_smem.index(0).slice(c0 + 32, 32, dim=1), dq_init, use_acc=False, is_async=True
        )
        t1 = warpgroup_mma(hi, k_smem.index(1).slice(c0 + 32, 32, dim=1), t1, is_async=True)
    ds_a = gl.convert_layout(ds, a_layout)
    dk_tok = warpgroup_mma(ds_a, q, dk, is_async=True)
    if OVERLAP:
        s_tok = _next_s(k, q_smem, q_ready, it, n_total, s_init, NUM_STAGES)
    # Wait for all but dK (and the next Sᵀ). The writer has read this warpgroup's staging
    # tiles of the step before (a fresh barrier counts as having completed the phase of
    # parity 1: the first pass is free).
    pending: gl.constexpr = 2 if OVERLAP else 1
    own: gl.constexpr = WG * CHUNKS
    if CHUNKS == 2:
        dv, dq0, dq1 = warpgroup_mma_wait(num_outstanding=pending, deps=(dv_tok, t0, t1))
        mbarrier.wait(dq_empty.index(WG), (it & 1) ^ 1)
        dq_smem.index(own).store(dq0)
        dq_smem.index(own + 1).store(dq1)
    else:
        dv, dq0 = warpgroup_mma_wait(num_outstanding=pending, deps=(dv_tok, t0))
        mbarrier.wait(dq_empty.index(WG), (it & 1) ^ 1)
        dq_smem.index(own).store(dq0)
    fence_async_shared()
    _release(dq_full.index(WG))
    if OVERLAP:
        dk, s = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok, s_tok))
    else:
        dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok,))
    _release(empty.index(slot))
    return dk, dv, s


@gluon.jit
def _step_rows(it, n_iter, m_lo, seqlen_pad, BLOCK_M: gl.constexpr):
    """(query block, its first row in the dQ accumulator past the key/value head's first
    query head's) of fused step ``it``: the steps run the group's query heads in turn, each
    over query blocks ``m_lo`` on. The consumers and the writer warp both take it from here."""
    m = m_lo + it % n_iter
    return m, (it // n_iter) * seqlen_pad + m * BLOCK_M


@gluon.jit
def _dq_writer(
    dq_desc, dq_smem, dq_full, dq_empty, bh, group, m_lo, n_m, seqlen_pad,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, DQ_WRITER: gl.constexpr,
):  # fmt: skip
    """The writer warp of ``DQ_WRITER``: for every step, in the consumers' order, each
    warpgroup's staged dQ products are added into the accumulator by the copy engine, and
    the warpgroup is told once they have been read (so the consumers never wait for the
    reduce-add themselves). Without ``DQ_WRITER`` it has no step."""
    CHUNKS: gl.constexpr = HEAD_DIM // 64
    head_row = bh * group * seqlen_pad
    n_iter = n_m - m_lo
    for it in range(group * n_iter if DQ_WRITER else 0):
        _m, rows = _step_rows(it, n_iter, m_lo, seqlen_pad, BLOCK_M)
        row = head_row + rows
        for w in gl.static_range(2):
            mbarrier.wait(dq_full.index(w), it & 1)
            for c in gl.static_range(CHUNKS):
                _tma_reduce_add(
                    dq_desc, [row, w * (HEAD_DIM // 2) + c * 32], dq_smem.index(w * CHUNKS + c)
                )
            tma.store_wait(pendings=0)
            mbarrier.arrive(dq_empty.index(w), count=1)


@gluon.jit
def _fused_consumer(
    k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, kv_bars, q_ready,
    do_ready, empty, ds_ready, ds_free, dq_full, dq_empty, dk_desc, dv_desc, DQ_ACC, dq_desc,
    dq_smem, seqlen_pad, num_kv_heads, bh, start_n, group, m_lo, n_m, qk_scale, scale,
    WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, SPLIT_COLS: gl.constexpr,
    DQ_TMA: gl.constexpr, OVERLAP: gl.constexpr, DQ_WRITER: gl.constexpr,
):  # fmt: skip
    """Consumer warpgroup ``WG``: dK and dV of key rows ``start_n + WG * 64`` to ``+ 64``,
    and their share of every query block's dQ (see :func:`_fused_step`)."""
    dtype: gl.constexpr = q_smem.dtype
    DQ_N: gl.constexpr = 32 if DQ_TMA else HEAD_DIM // 2 if SPLIT_COLS else HEAD_DIM
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16]
    )
    mma_kv: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    mma_dq: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, DQ_N, 16]
    )
    row0 = start_n + WG * WG_ROWS
    dk = gl.zeros([WG_ROWS, HEAD_DIM], gl.float32, layout=mma_kv)
    dv = gl.zeros([WG_ROWS, HEAD_DIM], gl.float32, layout=mma_kv)
    s_init = gl.zeros([WG_ROWS, BLOCK_M], gl.float32, layout=mma_s)
    dq_init = gl.zeros([BLOCK_M, DQ_N], gl.float32, layout=mma_dq)
    # The accumulator's rows of this key/value head's first query head (batch x heads
    # rows are in order: the group's query heads follow one another).
    dq_head = DQ_ACC + bh.to(gl.int64) * group * seqlen_pad * HEAD_DIM
    head_row = bh * group * seqlen_pad  # the same, as a row of dq_desc
    k = k_smem.index(WG)
    v = v_smem.index(WG)
    mbarrier.wait(kv_bars.index(WG), 0)
    n_iter = n_m - m_lo
    n_total = group * n_iter
    s = _first_s(k, q_smem, q_ready, n_total, s_init, NUM_STAGES) if OVERLAP else s_init
    for it in range(n_total):
        m, rows = _step_rows(it, n_iter, m_lo, seqlen_pad, BLOCK_M)
        dk, dv, s = _fused_step(
            it, m, dq_head + rows.to(gl.int64) * HEAD_DIM, head_row + rows, dq_desc, dq_smem,
            k, v, k_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, q_ready, do_ready,
            empty, ds_ready, ds_free, dq_full, dq_empty, dk, dv, s, s_init, dq_init, row0,
            qk_scale, scale, n_total, WG, BLOCK_M, NUM_STAGES, CAUSAL, SPLIT_COLS, DQ_TMA,
            OVERLAP, DQ_WRITER,
        )  # fmt: skip
    b = bh // num_kv_heads
    kv_h = bh % num_kv_heads
    v.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dv_desc, [b, kv_h, row0, 0], _box(v, dv_desc))
    if SPLIT_COLS:  # noqa: SIM102 (a compile-time branch around a run-time one)
        # The other warpgroup's dQ GEMMs read these K rows too: its last ones must be done
        # before dK overwrites them. Both warpgroups arrive on the last step's ds_free once
        # their dQ GEMMs have completed; this is the wait a step two further on would make
        # before rewriting that dS buffer (_fused_step: parity use ^ 1 of that step).
        if n_total > 0:
            if DQ_WRITER:
                # No ds_free: one more meeting on the dS barriers, past both last steps.
                _release(ds_ready.index(n_total % 2))
                mbarrier.wait(ds_ready.index(n_total % 2), (n_total // 2) & 1)
            else:
                last = n_total - 1
                mbarrier.wait(ds_free.index(last % 2), (last // 2) & 1)
    k.store(dk.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [b, kv_h, row0, 0], _box(k, dk_desc))
    tma.store_wait(pendings=0)


@gluon.jit
def _xrt_attn_bwd_fused_hopper(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc, DQ_ACC, dq_desc,
    seqlen_q, seqlen_pad, num_kv_heads, group, qk_scale, scale, num_key_blocks,
    batch_kv_heads, section,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, SPLIT_COLS: gl.constexpr, DQ_TMA: gl.constexpr, LPT: gl.constexpr,
    OVERLAP: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
    DQ_WRITER: gl.constexpr,
):  # fmt: skip
    """:func:`_xrt_attn_bwd_dkdv_hopper` (same grid, boxes and producer) that also adds each
    block's dQ = dS K (dS scaled) into ``DQ_ACC``: a zeroed float32 (batch x heads,
    seqlen_pad, HEAD_DIM) buffer. ``SPLIT_COLS``: the two consumers share their dSᵀ through
    shared memory and each adds half of dQ's columns over all 128 keys (one atomic per
    element and key block); else each adds all columns over its own 64 keys (two).
    ``DQ_TMA`` (with ``SPLIT_COLS``): the products go through shared memory
    and the copy engine's reduce-add (``dq_desc``: the accumulator as a 2-D float32
    (batch x heads x seqlen_pad, HEAD_DIM) tensor in [64, 32] boxes) instead of the
    consumers' own vector reductions. ``LPT``: the dK/dV kernel's 1-D grid. ``OVERLAP``
    (with ``DQ_TMA``): each step issues the next one's Sᵀ behind its dQ GEMMs.
    ``DQ_WRITER`` (with ``DQ_TMA``): a fourth partition, one warp, issues the reduce-adds
    (:func:`_dq_writer`), and the steps take FlashAttention-3's order
    (:func:`_fused_step_writer`; ``OVERLAP``: the next Sᵀ behind dK)."""
    gl.static_assert(SPLIT_COLS or not DQ_TMA)
    gl.static_assert(DQ_TMA or not OVERLAP)
    gl.static_assert(DQ_TMA or not DQ_WRITER)
    BLOCK_N: gl.constexpr = 2 * WG_ROWS
    gl.static_assert(BLOCK_N % BLOCK_M == 0)
    dtype: gl.constexpr = q_desc.dtype
    pid_n, bh = _block_and_head(num_key_blocks, batch_kv_heads, section, LPT)
    b = bh // num_kv_heads
    kv_h = bh % num_kv_heads
    start_n = pid_n * BLOCK_N
    n_m = gl.cdiv(seqlen_q, BLOCK_M)
    m_lo = gl.minimum(start_n // BLOCK_M, n_m) if CAUSAL else 0

    tile_q: gl.constexpr = gl.NVMMASharedLayout(q_desc.layout.swizzle_byte_width, 16)
    tile_kv: gl.constexpr = gl.NVMMASharedLayout(k_desc.layout.swizzle_byte_width, 16)
    tile_ds: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_ROWS, BLOCK_M], dtype)
    k_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_kv)
    v_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, HEAD_DIM], tile_kv)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], tile_q)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], tile_q)
    lse_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, 1, BLOCK_M], lse_desc.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, 1, BLOCK_M], lse_desc.layout)
    # SPLIT_COLS: two buffers of both warpgroups' dSᵀ; else one per warpgroup.
    ds_smem = gl.allocate_shared_memory(
        dtype, [2, BLOCK_N if SPLIT_COLS else WG_ROWS, BLOCK_M], tile_ds
    )
    # DQ_TMA: each consumer's staging tiles for its 32-column dQ products (an unused 2 KiB
    # placeholder otherwise).
    chunks: gl.constexpr = HEAD_DIM // 64 if DQ_TMA else 1
    dq_smem = gl.allocate_shared_memory(
        gl.float32, [2 * chunks, 64 if DQ_TMA else 8, 32], dq_desc.layout
    )
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    kv_bars = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    # DQ_WRITER: per consumer, its staged dQ products written / read by the writer.
    dq_full = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    dq_empty = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    for i in gl.static_range(2):
        mbarrier.init(kv_bars.index(i), count=1)
        mbarrier.init(ds_ready.index(i), count=2)
        mbarrier.init(ds_free.index(i), count=2)
        mbarrier.init(dq_full.index(i), count=1)
        mbarrier.init(dq_empty.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)

    # The writer's partition is in every build's source (the partitions are a static list);
    # without DQ_WRITER it has no step and compiles away (:func:`_dq_writer`).
    # fmt: off
    gl.warp_specialize(
        [
            (_fused_consumer, (
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, kv_bars,
                q_ready, do_ready, empty, ds_ready, ds_free, dq_full, dq_empty, dk_desc, dv_desc,
                DQ_ACC, dq_desc, dq_smem, seqlen_pad, num_kv_heads, bh, start_n, group, m_lo,
                n_m, qk_scale, scale, 0, HEAD_DIM, BLOCK_M, NUM_STAGES, CAUSAL, SPLIT_COLS,
                DQ_TMA, OVERLAP, DQ_WRITER,
            )),
            (_fused_consumer, (
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, kv_bars,
                q_ready, do_ready, empty, ds_ready, ds_free, dq_full, dq_empty, dk_desc, dv_desc,
                DQ_ACC, dq_desc, dq_smem, seqlen_pad, num_kv_heads, bh, start_n, group, m_lo,
                n_m, qk_scale, scale, 1, HEAD_DIM, BLOCK_M, NUM_STAGES, CAUSAL, SPLIT_COLS,
                DQ_TMA, OVERLAP, DQ_WRITER,
            )),
            (_dkdv_producer, (
                q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc,
                k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, kv_bars, q_ready,
                do_ready, empty, b, kv_h, start_n, num_kv_heads * group, group, m_lo, n_m,
                0, 0, 0, BLOCK_M, NUM_STAGES,
            )),
            (_dq_writer, (
                dq_desc, dq_smem, dq_full, dq_empty, bh, group, m_lo, n_m, seqlen_pad,
                HEAD_DIM, BLOCK_M, DQ_WRITER,
            )),
        ],
        [4, 1, 1],
        [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS],
    )
    # fmt: on


@gluon.jit
def _xrt_attn_bwd_dq_convert_hopper(
    DQ_ACC, DQ, stride_b, stride_h, stride_s, seqlen_q, seqlen_pad, num_heads,
    HEAD_DIM: gl.constexpr, BLOCK: gl.constexpr,
):  # fmt: skip
    """dQ = the fused kernel's float32 accumulator, in dQ's dtype, for BLOCK query
    rows. Grid (seqlen_pad / BLOCK, batch x heads), num_warps=4."""
    COL_THREADS: gl.constexpr = HEAD_DIM // 4
    layout: gl.constexpr = gl.BlockedLayout(
        [1, 4], [32 // COL_THREADS, COL_THREADS], [4, 1], [1, 0]
    )
    bh = gl.program_id(1)
    b = bh // num_heads
    h = bh % num_heads
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    acc_ptrs = DQ_ACC + (bh.to(gl.int64) * seqlen_pad * HEAD_DIM)
    acc_ptrs = acc_ptrs + gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    dq = gl.load(acc_ptrs)
    out_ptrs = DQ + (b.to(gl.int64) * stride_b + h.to(gl.int64) * stride_h)
    out_ptrs = out_ptrs + gl.expand_dims(rows.to(gl.int64) * stride_s, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < seqlen_q, 1) & gl.expand_dims(cols < HEAD_DIM, 0)
    gl.store(out_ptrs, dq.to(DQ.dtype.element_ty), mask=mask)
