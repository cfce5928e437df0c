"""Host side of the Gluon Hopper forward (:mod:`._hopper_kernels`): checks, variants, launch.

Imported only when the kernel runs: torch and Triton are imported inside the functions that
need them, so this module (and ``import xpuruntime``) stays light; the variant table is
plain data that the offline compile script reads without torch.

Variants name the tiles and the schedule: ``m{rows per consumer warpgroup}n{key block}
s{ring stages}{pp|np}[_{flags}]`` (``pp``: the consumer warpgroups take turns issuing their
GEMMs, ping-pong; ``np``: they issue freely). The optional flags, in this order:

- ``w3``: three consumer warpgroups (160 registers each) instead of two (240 each), so a CTA
  covers 3 x rows query rows;
- ``p``: persistent: one CTA per SM (two with ``o2``; at most) loops over the work items
  the host dealt it (:func:`_schedule_entries`: causal ones longest-first, heads in
  L2-sized sections, each item to the CTA with the fewest key blocks so far); the ring runs
  on across items and the output is staged in its own shared-memory tiles, so the next
  item's loads overlap this one's end;
- ``l``: one CTA per work item as without ``p``, on a 1-D grid in ``p``'s order (L2
  sections, causal items longest-first), which the hardware dispatches as CTAs finish:
  longest-first scheduling without a persistent loop;
- ``q2`` (with ``p``): two query buffers a consumer warpgroup, so the producer loads the
  next item's query tiles, and then its first key and value tiles, while this item still
  runs (with one, it waits for this item's last Q·Kᵀ before it may load them);
- ``e4``: one exponential of the softmax in 4 computed on the FMA pipe by a polynomial
  instead of the special-function unit (``_hopper_kernels._exp2``), where the softmax's
  exponentials, not the GEMMs, bound a block (fp8; at head size 64 in 16 bits it measured
  slower, see docs/attention.md);
- ``o2``: two CTAs per SM: the kernel is compiled for 80 registers a thread at launch
  (``maxnreg``), and the consumers get 104 and 112 after ``setmaxnreg`` (the producer's
  warpgroup keeps 24), so two CTAs' warps share the SM and one CTA's start and end (first
  loads, output store) overlap the other's GEMMs; a persistent grid gets two CTAs per SM.
  Only key blocks of 64 fit those registers, and ptxas serialises their wgmma all the same
  (C7512: with two GEMMs in flight the 104-register consumer is up to 8 short), unless
  ``g1`` keeps one in flight;
- ``g1``: a consumer warpgroup issues P_{j-1}·V_{j-1}, waits, then S_j = Q·K_jᵀ and waits,
  instead of overlapping the two: with ``o2`` ptxas then pipelines each GEMM's k-steps (no
  C7512, 0-36 bytes of spills against 56-64), and the other CTA's warpgroups overlap this
  one's softmax. On an H200, head size 64 causal, kernels alone: ``po2`` 0.94 / 0.96 /
  0.91x cuDNN at 1024 / 2048 / 4096 keys, ``po2g1`` 1.01 / 1.02 / 1.01x, the same output to
  the bit; the ``o2`` defaults take it (:data:`_DEFAULTS`, docs/attention.md);
- ``r``: lazy rescaling (FlashAttention-4's): a row's running max moves only when a block's
  max exceeds it by more than 2**8 (2**4 in fp8), so the output accumulator's rescale, one
  multiply per element a key block, is skipped by the threads whose rows did not move
  (``_hopper_kernels._rescale``). The fp8 default takes it; no 16-bit default does: its
  output errors are 1.8-3.5 % above cuDNN's (:data:`_DEFAULTS`);
- ``u`` (fp8 only): each key block's row sums of P by the tensor cores, a GEMM of P
  against shared-memory tiles of ones (:data:`SUM_COLUMNS` columns) issued beside P·V and
  added in float32, instead of one float32 add per probability in the softmax
  (``_hopper_kernels._consumer_blocks``): the softmax, which bounds the fp8 kernel's blocks,
  loses 64 adds a thread a block of 128 keys (39 instructions of 607 net), and the sum is
  of the rounded P that P·V multiplies, so the log-sum-exp is the one O was normalised
  with (within log(1 / (1 - 2**-4)) of the exact one). With 16-bit P it measured slower
  (0.90-0.98x its twin on an H200: there the GEMMs bound a block), so 16-bit calls refuse
  it; its rows of ones take key blocks of at least 128 (128-byte rows);
- ``b`` (fp8, with ``u``): no exponential for P. Two multiply-adds (the first saturating)
  leave in a float32's low 16 bits the half whose bits are about 2**10 * (x + 15), which is
  2**x interpolated linearly within each octave, and the conversion to e4m3 reads those
  halves, paired by a byte permute (``_hopper_kernels._HALF_BITS_ASM``): a second
  multiply-add and half a permute a value instead of the special-function unit's
  exponential, which bounded the fp8 kernel's blocks as much as its GEMMs did. e4m3 keeps
  3 bits of P (rounding errors up to 6.25 %), and the interpolation's (-3.9 % to +2.0 %
  after a fixed factor) is of that size.

E.g. ``m64n128s2pp_w3p``, ``m64n128s2pp_l``, ``m64n128s3pp_e4``. ``XPURUNTIME_HOPPER_ATTENTION_VARIANT``
overrides the default per head size, so one GPU run can time them all (and
``XPURUNTIME_HOPPER_FP8_VARIANT`` the fp8 kernel's: :func:`fp8_variant`).
"""

from __future__ import annotations

import functools
import heapq
import math
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from xpuruntime.kernels.attention import exp_modes, gluon_launch
from xpuruntime.kernels.attention.scale_sign import query_for_scale
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    UnsupportedOperationError,
    XpuRuntimeError,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "FP8_HEAD_DIMS",
    "HEAD_DIMS",
    "VARIANT_ENV",
    "ForwardRun",
    "Fp8Scales",
    "Relaunch",
    "Variant",
    "hopper_attention_forward",
    "hopper_attention_forward_run",
    "hopper_fp8_forward",
    "kernel_constants",
    "parse_variant",
    "tma_addressable",
    "variant_names",
]

VARIANT_ENV = "XPURUNTIME_HOPPER_ATTENTION_VARIANT"
_LOG2E = 1.4426950408889634


#: Columns of the rows' sums' GEMM (``u``): wgmma's narrowest N; the kernel's tiles of ones
#: have this many rows.
SUM_COLUMNS = 8
#: Shared memory of an H100/H200 SM (228 KiB); a CTA may use all of it but 1 KiB the
#: hardware reserves per CTA (227 KiB alone).
_SM_SMEM = 228 << 10
#: Keys and values of one L2 section of the persistent order: FlashAttention-3's 32 MiB of
#: the H100's 50 MB L2.
_L2_SECTION_BYTES = 32 << 20


@dataclass(frozen=True)
class Variant:
    """One compiled shape of the kernel (see the module docstring for the name)."""

    block_m_wg: int
    block_n: int
    num_stages: int
    pingpong: bool
    num_wg: int = 2
    persistent: bool = False
    #: One CTA per work item on a 1-D grid in the persistent order.
    lpt: bool = False
    #: One exponential in four on the FMA pipe.
    exp_emu: bool = False
    #: CTAs resident on one SM (``o2``: two).
    ctas_per_sm: int = 1
    producer_regs: int = 24
    #: Query tiles a consumer warpgroup holds (``q2``: two, persistent only).
    q_buffers: int = 1
    #: The running max moves only by more than a threshold (``r``).
    lazy: bool = False
    #: A consumer warpgroup has one GEMM in flight at a time (``g1``).
    one_gemm: bool = False
    #: The rows' sums of P by a GEMM against a tile of ones (``u``).
    sum_mma: bool = False
    #: fp8 P from a half's bits instead of exponentials (``b``).
    half_bits: bool = False

    def __post_init__(self) -> None:
        if self.q_buffers not in (1, 2) or (self.q_buffers == 2 and not self.persistent):
            raise InvalidArgumentError(
                "hopper attention: two query buffers (q2) take a persistent variant (p), "
                f"got {self.q_buffers} buffers, persistent={self.persistent}"
            )
        if self.ctas_per_sm not in (1, 2):
            raise InvalidArgumentError(
                f"hopper attention: one or two CTAs an SM, not {self.ctas_per_sm}"
            )
        if self.ctas_per_sm == 2 and (self.num_wg, self.block_m_wg, self.block_n) != (2, 64, 64):
            raise InvalidArgumentError(
                f"hopper attention variant {self.name!r}: two CTAs an SM (o2) take two consumer "
                "warpgroups of 64 rows and key blocks of 64 (104-112 registers a consumer hold "
                "no larger tiles)"
            )
        if self.sum_mma and self.block_n < 128:
            raise InvalidArgumentError(
                f"hopper attention variant {self.name!r}: the sums' GEMM (u) reads rows of "
                "ones of 128 bytes, so it takes key blocks of 128 or more"
            )
        if self.half_bits and self.exp_emu:
            raise InvalidArgumentError(
                f"hopper attention variant {self.name!r}: half bits (b) replace every "
                "exponential of P, so e4 has none left to move: take b or e4"
            )
        if self.half_bits and not self.sum_mma:
            raise InvalidArgumentError(
                f"hopper attention variant {self.name!r}: half bits (b) leave no float32 P "
                "for the softmax to sum; the sums' GEMM sums the e4m3 P: take u with b"
            )
        if self.sum_mma and self.one_gemm:
            raise InvalidArgumentError(
                f"hopper attention variant {self.name!r}: the sums' GEMM (u) is issued beside "
                "an overlapped P·V, which g1 does not have"
            )

    def twin(self, *, lpt: bool) -> Variant:
        """This variant without its persistent loop: one CTA per work item on the 2-D grid,
        or with ``lpt`` on the 1-D grid in the persistent order (``_l``); one query buffer
        a warpgroup, as each CTA runs one item."""
        return replace(self, persistent=False, lpt=lpt, q_buffers=1)

    @property
    def exp_mode(self) -> int:
        """The kernel's ``EXP_MODE`` (:mod:`.exp_modes`)."""
        if self.exp_emu:
            return exp_modes.POLY4
        return exp_modes.HALF_BITS if self.half_bits else exp_modes.SFU

    @property
    def launch_regs(self) -> int:
        """Registers a thread at launch: ``ctas_per_sm`` CTAs of ``num_wg + 1`` warpgroups
        (Triton pads the producer warp to one) share the SM's 65536, in steps of 8."""
        return 65536 // (self.ctas_per_sm * 128 * (self.num_wg + 1)) // 8 * 8

    @property
    def consumer_regs(self) -> int:
        """Per consumer thread after ``setmaxnreg``: the CTA's registers less the producer's,
        split evenly in steps of 8 (240 for two consumer warpgroups, 160 for three, 104 with
        two CTAs an SM, where the default partition gets the remainder, 112)."""
        warpgroups = self.num_wg + 1
        return (self.launch_regs * warpgroups - self.producer_regs) // self.num_wg // 8 * 8

    @property
    def maxnreg(self) -> int | None:
        """ptxas' ``.maxnreg`` for two CTAs an SM (:attr:`launch_regs`); None with one: the
        compiler's choice, which the register file bounds anyway."""
        return None if self.ctas_per_sm == 1 else self.launch_regs

    @property
    def block_m(self) -> int:
        return self.num_wg * self.block_m_wg

    @functools.cached_property  # every call's detail names the variant
    def name(self) -> str:
        schedule = "pp" if self.pingpong else "np"
        flags = (
            ("w3" if self.num_wg == 3 else "")
            + ("p" if self.persistent else "")
            + ("l" if self.lpt else "")
            + ("q2" if self.q_buffers == 2 else "")
            + ("e4" if self.exp_emu else "")
            + ("o2" if self.ctas_per_sm == 2 else "")
            + ("g1" if self.one_gemm else "")
            + ("r" if self.lazy else "")
            + ("u" if self.sum_mma else "")
            + ("b" if self.half_bits else "")
        )
        return f"m{self.block_m_wg}n{self.block_n}s{self.num_stages}{schedule}" + (
            f"_{flags}" if flags else ""
        )

    def smem_limit(self) -> int:
        """Shared memory one CTA may use: its share of the SM's, less the 1 KiB the hardware
        reserves per CTA."""
        return _SM_SMEM // self.ctas_per_sm - 1024

    def smem_bytes(self, head_dim: int, element_size: int = 2) -> int:
        """Shared memory of the tiles (the mbarriers add a few bytes); fp8 (``element_size``
        1) stages its 16-bit output in tiles of its own."""
        q_tile = self.num_wg * self.block_m_wg * head_dim
        out_tiles = 2 * q_tile if (self.persistent or element_size == 1) else 0
        ring = 2 * self.num_stages * self.block_n * head_dim
        ones = self.num_stages * SUM_COLUMNS * self.block_n if self.sum_mma else 0
        return element_size * (self.q_buffers * q_tile + ring + ones) + out_tiles


#: Candidates per head size (``--variants all`` of the scripts; the defaults are
#: :data:`_DEFAULTS`'). All compile for sm_90a without spills but the ``o2`` ones, whose 80
#: registers at launch spill 32-64 bytes (``po2r`` 44-104) and serialise their wgmma (their
#: ``g1`` twins: 0 bytes, ``po2g1`` 36 causal, pipelined), and at head size 128
#: ``m64n128s2pp_pr``/``_pq2r``, 8-12 bytes stored and 20-28 loaded
#: (``scripts/hopper_attention_compile.py``; measured faster than their twins without ``r``
#: all the same). ``r`` is not offered with ``w3``: 160 registers spill 780-980 bytes.
_VARIANTS: dict[int, tuple[str, ...]] = {
    64: (
        "m64n128s2pp_w3", "m64n128s2pp", "m64n128s2np", "m64n128s3pp", "m128n64s2pp",
        "m64n128s2pp_p", "m64n128s3pp_p", "m64n128s2pp_l", "m64n128s2pp_w3l",
        "m64n64s2np_po2", "m64n64s2np_po2r", "m64n64s3np_po2", "m64n64s2np_o2",
        "m64n64s2np_lo2", "m64n128s2pp_pq2", "m64n128s2pp_pq2r", "m64n128s2pp_pr",
        "m64n64s2np_po2g1", "m64n64s2np_o2g1",
    ),
    128: (
        "m64n128s2pp", "m64n128s2np", "m64n64s3pp", "m64n128s3pp", "m64n128s2pp_p",
        "m64n128s2np_p", "m64n128s2pp_l", "m64n64s3np_p", "m64n64s3np", "m64n64s2np_p",
        "m64n64s3np_pq2", "m64n128s2pp_pq2", "m64n128s2pp_pq2r", "m64n128s2pp_pr",
        "m64n128s2pp_r",
    ),
    256: ("m64n64s2pp", "m64n64s2np"),
}  # fmt: skip
HEAD_DIMS = tuple(_VARIANTS)

#: fp8 (e4m3) candidates, default first: the same kernel with e4m3 tiles (P carried in
#: float32). Its GEMMs take half the tensor-core time of 16-bit ones, so the softmax bounds a
#: block (hence ``e4``, 1-4 % faster on an H200, and ``r``, which skips O's rescale, 64
#: multiplies of the loop's 588 instructions a warp: 3-13 % faster on an H200 at 4096 and
#: 16384 keys, full and causal, relative error against float32 within 2 % of its own without
#: ``r``, docs/attention.md), three ring stages
#: keep the copy engine ahead, and the persistent schedule (``p``) was the fastest or tied
#: on an H200 at 4096 and 16384 keys, full and causal (causal 4096: 593 TFLOP/s against 551
#: for ``_l`` and 502-547 for the 2-D grids; ``benchmarks/attention_fp8_bench.py --sweep``).
#: Two consumer warpgroups of 64 rows (the query scales are per 64 rows). Head size 128
#: only: at 64 the Triton fp8 kernel was as fast or faster at every length timed on an H200
#: (docs/attention.md). ``_pru`` takes the rows' sums of P by a GEMM against a tile of
#: ones (``u``): on an H200 (kernels alone, hd128, 4096-16384 keys, full and
#: causal) 1.16-1.33x our bf16 forward against ``_pe4r``'s 1.11-1.24x in the same runs,
#: with the same error against float32 (4.8-5.4e-2). Without ``u``, ``e4`` paid for itself
#: (``_pe4r``); with it, it does not (``_pe4ru`` 0.98-1.00x ``_pru``). At full attention the
#: ``u`` variants spill 12-20 bytes of scalars, outside the key-block loop (the offline
#: compile script allows them, ``U_SPILL_BYTES``). Without ping-pong turns (``np``: each
#: warpgroup issues its GEMMs when it is ready, as the tensor cores are not what bounds an
#: fp8 block), ``m64n128s3np_pru`` ran at 0.98-1.13x ``m64n128s3pp_pru`` (geometric mean
#: 1.03x) in two runs of kernels alone on an H200 (hd128, 2048-16384 keys, full and causal;
#: slower only at 2048 causal in one run), and through the product path at 1.00-1.04x: so it
#: was the default (docs/attention.md, twenty-eighth stop). ``m64n128s3np_prub``, the same
#: with P from a half's bits (``b``: no exponential, the special-function unit idle), is the
#: default since the thirty-first stop: kernels alone on an H200 1.43 / 1.48 / 1.53x our bf16
#: forward at 4096 / 8192 / 16384 keys full and 1.27 / 1.36 / 1.47x causal, against
#: ``_pru``'s 1.29 / 1.35 / 1.39x and 1.15 / 1.21 / 1.33x in the same run; relative error
#: against float32 5.6e-2 full and 5.0e-2 causal (``_pru`` 5.4e-2, 4.7e-2; cuDNN's fp8
#: forward 6.1e-2, 5.5e-2). Its loop has no spills. ``m64n128s3np_pq2rub``, the same with
#: two query tiles a warpgroup (the next item's query loads while this one runs), is the
#: default since the thirty-fourth stop: kernels alone on an H200 (e4m3 inputs, 4096-16384
#: keys, full and causal; five runs) it was faster than ``_prub`` in 25 of 28 comparisons,
#: 0.99-1.05x (median 1.008x), with the same output to the bit; 167 KB of shared memory
#: (16 KiB more), no spills (docs/attention.md).
_FP8_VARIANTS: dict[int, tuple[str, ...]] = {
    128: (
        "m64n128s3np_pq2rub", "m64n128s3np_prub", "m64n128s3np_pru", "m64n128s3pp_prub",
        "m64n128s3pp_pru", "m64n128s3pp_pe4ru", "m64n128s3pp_pe4r",
        "m64n128s3pp_pe4", "m64n128s3pp_le4", "m64n128s3pp_e4",
        "m64n128s2pp_e4",
        "m64n128s2np_e4", "m64n128s2pp", "m64n128s2np",
    ),
}  # fmt: skip
FP8_HEAD_DIMS = tuple(_FP8_VARIANTS)


def variant_names(head_dim: int, *, fp8: bool = False) -> tuple[str, ...]:
    """The candidate variants of ``head_dim`` (of the fp8 kernel with ``fp8``: default
    first)."""
    return _FP8_VARIANTS[head_dim] if fp8 else _VARIANTS[head_dim]


@functools.lru_cache(maxsize=256)  # on every call's path: the regex costs microseconds
def parse_variant(name: str) -> Variant:
    """``m64n128s2pp_w3p`` -> Variant(64, 128, 2, pingpong=True, num_wg=3, persistent=True)."""
    match = re.fullmatch(
        r"m(\d+)n(\d+)s(\d+)(pp|np)(?:_(?=.)(w3)?(p|l)?(q2)?(e4)?(o2)?(g1)?(r)?(u)?(b)?)?",
        name.strip(),
    )
    if match is None:
        raise InvalidArgumentError(
            f"hopper attention variant {name!r} is not of the form "
            "m<rows>n<keys>s<stages>pp|np[_[w3][p|l][q2][e4][o2][g1][r][u][b]]"
        )
    rows, keys, stages = (int(match.group(i)) for i in (1, 2, 3))
    if rows not in (64, 128) or keys not in (64, 128, 192, 256) or stages not in (2, 3, 4):
        raise InvalidArgumentError(
            f"hopper attention variant {name!r}: rows per warpgroup 64/128, key block "
            "64/128/192/256, stages 2-4"
        )
    return Variant(
        rows,
        keys,
        stages,
        match.group(4) == "pp",
        num_wg=3 if match.group(5) else 2,
        persistent=match.group(6) == "p",
        lpt=match.group(6) == "l",
        q_buffers=2 if match.group(7) else 1,
        exp_emu=bool(match.group(8)),
        ctas_per_sm=2 if match.group(9) else 1,
        one_gemm=bool(match.group(10)),
        lazy=bool(match.group(11)),
        sum_mma=bool(match.group(12)),
        half_bits=bool(match.group(13)),
    )


_NO_LIMIT = 1 << 62
#: Defaults per (head size, causal): (keys below which it applies, variant), the first that
#: applies. Kernels alone on an H200 (``benchmarks/hopper_variants.py``, docs/attention.md):
#: the persistent variants (``_p``, their work dealt by key blocks) win on short sequences,
#: where a CTA's start and end (first loads, output store) are a large share of its work and
#: the persistent loop overlaps them with the next item's, and on causal ones up to 8192 keys
#: at head size 64 and at every length at 128; three consumer warpgroups (192 query rows a
#: CTA) win from 2048 keys at head size 64 (full), from 8192 causal with one CTA per item.
#: Key blocks of 64 without ping-pong win where each consumer warpgroup stops at its own
#: rows' last causal block: at head size 64 causal below 8192 keys with two CTAs an SM and
#: one GEMM in flight a warpgroup (``po2g1``, kernels alone on an H200: 1.01 / 1.01 / 1.02 /
#: 1.01 / 0.99-1.00x cuDNN at 512 / 1024 / 2048 / 4096 / 8192 keys against ``po2``'s 0.94 /
#: 0.94 / 0.96 / 0.91 / 0.91x and ``_p``'s 0.82 / 0.91 / 0.96 / 1.01x from 1024; from 8192
#: ``_w3l`` 1.06x), at 128 causal below 1024 with three ring stages (0.89x against 0.79x
#: at 512). Below 1024 keys (2048 at head size 128 full) two query buffers (``q2``) let the
#: next item's loads start before this item's last Q·Kᵀ: at 512 keys, in three runs on two
#: H200s, head size 128 causal 0.93x against 0.89x, full 0.93-0.94x against 0.91-0.92x, head
#: size 64 full ``m64n128s2pp_pq2`` 0.95-1.00x against ``po2``'s 0.90-0.94x; from 2048 keys
#: no faster (0.99-1.01x of one buffer), and no change at head size 64 causal. No default
#: takes lazy rescaling (``r``): faster where it was timed (head size 64 causal ``po2r``
#: 1.03x cuDNN at 2048 keys against ``po2``'s 0.95x, ``_pr`` 1.02x at 4096 against ``_p``'s
#: 0.99x; head size 128 ``_pr`` up to 1.21x at 8192 causal against 1.14x), its output errors
#: against float32 are 1.8-3.5 % above cuDNN's (relative Frobenius; with an exact running max
#: a row's largest probabilities are 1 and just under it, where bf16 rounds them least,
#: docs/attention.md), and the defaults keep cuDNN's errors. The ``r`` candidates stay
#: available by name (:data:`VARIANT_ENV`).
_DEFAULTS: dict[tuple[int, bool], tuple[tuple[int, str], ...]] = {
    (64, False): (
        (1024, "m64n128s2pp_pq2"), (2048, "m64n128s2pp_p"), (_NO_LIMIT, "m64n128s2pp_w3"),
    ),
    (64, True): (
        (8192, "m64n64s2np_po2g1"), (_NO_LIMIT, "m64n128s2pp_w3l"),
    ),
    (128, False): (
        (2048, "m64n128s2pp_pq2"), (16384, "m64n128s2pp_p"), (_NO_LIMIT, "m64n128s2pp"),
    ),
    (128, True): ((1024, "m64n64s3np_pq2"), (_NO_LIMIT, "m64n128s2pp_p")),
    (256, False): ((_NO_LIMIT, "m64n64s2pp"),),
    (256, True): ((_NO_LIMIT, "m64n64s2pp"),),
}  # fmt: skip


#: Packed sequences run on the 2-D grid (a ``_p`` or ``_l`` variant as its 2-D twin): their
#: defaults are the 2-D ones measured before the persistent variants, and the short ones'
#: key blocks of 64 without ping-pong (by the longest sequence; measured on an H200 with
#: 16k tokens of lengths 0.5-1.5x a mean of 512, 1024, 2048: at head size 64, two CTAs an
#: SM were 4-25 % faster causal up to a longest sequence of 2846 keys and full up to 1522,
#: slower full at 2846; at 128 three stages were 4-10 % faster causal up to 1384, slower
#: from 2986 and on full attention). With one GEMM in flight (``o2g1``, the same output to
#: the bit) the head-size-64 ones took 6-27 % less time than ``o2`` (twenty-third stop:
#: causal 0.184 / 0.271 / 0.426 ms against 0.253 / 0.297 / 0.466 and ``m64n128s2pp``'s
#: 0.300 / 0.381 / 0.507; full 0.247 / 0.428 ms against 0.263 / 0.455 up to 1522 keys, and
#: at 2846 0.755 against ``_w3``'s 0.732).
_PACKED_DEFAULTS: dict[tuple[int, bool], tuple[tuple[int, str], ...]] = {
    (64, False): ((2048, "m64n64s2np_o2g1"), (_NO_LIMIT, "m64n128s2pp_w3")),
    (64, True): (
        (4096, "m64n64s2np_o2g1"), (8192, "m64n128s2pp"), (_NO_LIMIT, "m64n128s2pp_w3"),
    ),
    (128, False): ((_NO_LIMIT, "m64n128s2pp"),),
    (128, True): ((2048, "m64n64s3np"), (_NO_LIMIT, "m64n128s2pp")),
    (256, False): ((_NO_LIMIT, "m64n64s2pp"),),
    (256, True): ((_NO_LIMIT, "m64n64s2pp"),),
}  # fmt: skip


def _variant(
    head_dim: int, given: str | None, causal: bool, seqlen_k: int, packed: bool = False
) -> tuple[Variant, str]:
    """The variant a call runs before :func:`hopper_attention_forward_run`'s twins, and why;
    ``seqlen_k`` is the longest key length of a packed batch."""
    if given:
        return _checked_variant(head_dim, given), "given"
    if os.environ.get(VARIANT_ENV):
        return _checked_variant(head_dim, os.environ[VARIANT_ENV]), f"from {VARIANT_ENV}"
    table = _PACKED_DEFAULTS if packed else _DEFAULTS
    name = next(name for below, name in table[head_dim, causal] if seqlen_k < below)
    what = f"packed sequences of up to {seqlen_k} keys" if packed else f"{seqlen_k} keys"
    why = f"the default at head size {head_dim}, {'causal' if causal else 'full'}, {what}"
    return _checked_variant(head_dim, name), why


@functools.cache
def _checked_variant(head_dim: int, name: str) -> Variant:
    variant = parse_variant(name)
    if variant.smem_bytes(head_dim) > variant.smem_limit():
        raise InvalidArgumentError(
            f"hopper attention variant {name!r} needs {variant.smem_bytes(head_dim)} bytes of "
            f"shared memory at head size {head_dim}; a CTA has {variant.smem_limit()}"
        )
    return variant


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: bool = False) -> None:
    """Shapes, dtypes and devices (an sm_90 GPU); ``packed``: (total, heads, head_dim)
    tensors of packed sequences, else (batch, heads, seq, head_dim)."""
    import torch

    rank = 3 if packed else 4
    if q.dim() != rank or k.dim() != rank or v.dim() != rank:
        what = (
            "(total, heads, head_dim) with cu_seqlens"
            if packed
            else "(batch, heads, seq, head_dim)"
        )
        raise InvalidArgumentError(
            f"hopper attention takes {what} query, key and value, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise UnsupportedOperationError(
            "hopper attention supports bfloat16 and float16 (all three alike), got "
            f"{q.dtype}, {k.dtype}, {v.dtype}"
        )
    heads, head_dim = q.shape[1], q.shape[-1]  # heads second in both layouts
    if head_dim not in _VARIANTS:
        raise UnsupportedOperationError(
            f"hopper attention supports head sizes {', '.join(map(str, HEAD_DIMS))}, not {head_dim}"
        )
    same_batch = packed or k.shape[0] == q.shape[0]  # packed batches are cu_seqlens'
    if k.shape != v.shape or not same_batch or k.shape[-1] != head_dim:
        raise InvalidArgumentError(
            f"hopper attention: key {tuple(k.shape)} and value {tuple(v.shape)} must match "
            f"each other and the query's batch and head size ({tuple(q.shape)})"
        )
    kv_heads = k.shape[1]
    if kv_heads == 0 or heads % kv_heads:
        raise InvalidArgumentError(
            f"hopper attention: query heads ({heads}) must be a multiple of key/value heads "
            f"({kv_heads})"
        )
    for name, x in (("query", q), ("key", k), ("value", v)):
        if x.device.type != "cuda":
            raise UnsupportedOperationError(
                f"hopper attention runs on CUDA tensors; {name} is on {x.device}"
            )
    if k.device != q.device or v.device != q.device:
        raise InvalidArgumentError(
            "hopper attention: query, key and value are on different devices"
        )
    major, minor = _capability(q.device)
    if (major, minor) != (9, 0):
        raise UnsupportedOperationError(
            f"hopper attention is compiled for sm_90a (H100/H200); {q.device} is compute "
            f"capability {major}.{minor}"
        )


def tma_addressable(x: torch.Tensor) -> bool:
    """Whether TMA can address the tensor: unit-stride head dimension, 16-byte aligned base
    and strides."""
    size = x.element_size()
    *outer, inner = x.stride()
    offsets = x.data_ptr()  # aligned iff every one is: OR them (all are non-negative)
    for stride in outer:
        offsets |= stride * size
    return inner == 1 and offsets % 16 == 0


def _tma_ready(x: torch.Tensor) -> torch.Tensor:
    """The tensor itself when TMA can address it, else a contiguous copy (a copy always:
    ``contiguous()`` returns the tensor itself when only a size-1 dimension's stride is
    unaligned)."""
    import torch

    return x if tma_addressable(x) else x.clone(memory_format=torch.contiguous_format)


def rows_as_heads(x: torch.Tensor) -> torch.Tensor:
    """The Gluon kernels' 4-D view of packed (total, heads, head_dim) rows: (1, heads, total,
    head_dim)."""
    return x.transpose(0, 1).unsqueeze(0)


def _check_out(out: torch.Tensor, q: torch.Tensor) -> None:
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise InvalidArgumentError(
            f"hopper attention: out is {tuple(out.shape)} {out.dtype} on {out.device}; it must "
            f"be the query's {tuple(q.shape)} {q.dtype} on {q.device}"
        )


def _packed_lengths(
    q: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    max_seqlen_q: int | None,
    max_seqlen_k: int | None,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The packed batch's offsets (checked) and longest lengths (read from the offsets when
    not given: a device sync)."""
    import torch

    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise InvalidArgumentError(
            "hopper attention: give both cu_seqlens_q and cu_seqlens_k (or neither)"
        )
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dim() != 1 or cu.numel() < 1 or cu.dtype != torch.int32 or cu.device != q.device:
            raise InvalidArgumentError(
                f"hopper attention: {name} must be a 1-D int32 tensor of batch+1 offsets on "
                f"{q.device}, got {tuple(cu.shape)} {cu.dtype} on {cu.device}"
            )
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise InvalidArgumentError(
            f"hopper attention: cu_seqlens_q and cu_seqlens_k describe different batch sizes "
            f"({cu_seqlens_q.numel() - 1} and {cu_seqlens_k.numel() - 1})"
        )
    lengths = []
    for given, cu in ((max_seqlen_q, cu_seqlens_q), (max_seqlen_k, cu_seqlens_k)):
        if given is None:
            given = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
        lengths.append(int(given))
    return cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), lengths[0], lengths[1]


def _capability(device: torch.device) -> tuple[int, int]:
    """The device's compute capability, (0, 0) off CUDA (asked once per device: the
    launcher's host time is most of a short call's)."""
    import torch

    if device.type != "cuda":
        return (0, 0)
    return _capability_of(torch.cuda.current_device() if device.index is None else device.index)


@functools.cache
def _capability_of(index: int) -> tuple[int, int]:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


@functools.cache
def _shared_layout(row_bytes: int, bits: int) -> Any:
    """The tiles' shared-memory layout for rows of ``row_bytes`` of ``bits``-bit elements
    (the swizzle depends only on a row's bytes, NVMMA's default); built once, as building it
    validates it."""
    from triton.experimental.gluon import language as gl

    swizzle = 128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=bits, rank=4)


def _descriptor(x: torch.Tensor, rows: int, cols: int | None = None) -> gluon_launch.Tma:
    """A TMA descriptor over the 4-D ``x`` in boxes of ``rows`` x ``cols`` (default: the whole
    last dimension) of one (batch, head)."""
    cols = x.shape[3] if cols is None else cols
    layout = _shared_layout(cols * x.element_size(), 8 * x.element_size())
    return gluon_launch.Tma(x, (1, 1, rows, cols), layout)


@functools.cache
def _sm_count(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


@dataclass(frozen=True)
class _Dims:
    """A call's sizes; packed, ``batch`` is the number of sequences and the lengths are the
    longest ones (the grid's)."""

    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int


def l2_section(unit_bytes: int, heads_per_unit: int, batch_heads: int) -> int:
    """Batch x heads per L2 section of a 1-D work order (``_hopper_kernels._section_order``):
    a power of two units whose streamed data (``unit_bytes`` each: the keys and values of a
    key/value head for the forward) fit :data:`_L2_SECTION_BYTES` together, times the
    ``heads_per_unit`` heads of the grid that share each unit; at most ``batch_heads``."""
    fit = max(1, _L2_SECTION_BYTES // unit_bytes)
    return min((1 << (fit.bit_length() - 1)) * heads_per_unit, batch_heads)


def _grid(
    config: Variant, d: _Dims, element_size: int, device_index: int
) -> tuple[tuple[int, ...], int]:
    """The launch grid and the L2 section (batch x heads per section) of the 1-D order of the
    ``_p`` and ``_l`` variants: a power of two key/value heads whose keys and values fit the
    section's bytes, times the query heads sharing each. The kernel indexes the work items
    (and a persistent schedule's entries) in 32 bits."""
    m_tiles = math.ceil(d.seqlen_q / config.block_m)
    if not (config.persistent or config.lpt):
        return (m_tiles, d.batch * d.heads), 1
    kv_bytes = 2 * d.seqlen_k * d.head_dim * element_size
    section = l2_section(kv_bytes, d.heads // d.kv_heads, d.batch * d.heads)
    items = m_tiles * d.batch * d.heads
    grid = items if config.lpt else min(items, config.ctas_per_sm * _sm_count(device_index))
    if items + grid + 1 >= 2**31:  # a persistent schedule holds grid + 1 bounds, then items
        raise UnsupportedOperationError(
            f"hopper attention variant {config.name}: {items} work items do not fit the "
            "kernel's 32-bit indices; name a variant without _p or _l"
        )
    return (grid,), section


#: A work item's cost beyond its key blocks, in blocks: its last P·V and output store, and
#: the next item's first GEMM behind them (about one block), for the persistent schedules.
_ITEM_BLOCKS = 1
#: The persistent schedules built, per device and shape. None is ever dropped: a CUDA graph
#: captured with one keeps its address (they take 4 bytes a work item).
_SCHEDULES: dict[tuple[Any, ...], torch.Tensor] = {}


def _item_key_blocks(
    d: _Dims, item: int, block_m: int, block_n: int, causal: bool, section: int
) -> int:
    """The key blocks of work item ``item`` in the kernel's 1-D order (``_hopper_kernels.
    _section_order``: L2 sections of ``section`` batch x heads, query tiles row-block-major
    within each, causal tiles longest first)."""
    num_m = math.ceil(d.seqlen_q / block_m)
    batch_heads = d.batch * d.heads
    per_section = section * num_m
    first_bh = (item // per_section) * section
    m = (item % per_section) // min(section, batch_heads - first_bh)
    if not causal:
        return math.ceil(d.seqlen_k / block_n)
    m = num_m - 1 - m
    return math.ceil(min(m * block_m + block_m, d.seqlen_k) / block_n)


def _schedule_entries(
    d: _Dims, block_m: int, block_n: int, causal: bool, grid: int, section: int
) -> list[int]:
    """The persistent kernel's ``SCHED`` (``_hopper_kernels._xrt_attn_fwd_hopper``): ``grid +
    1`` bounds, then each CTA's work items (their indices in the kernel's 1-D order: L2
    sections, causal tiles longest first within each), dealt in that order to the CTA with
    the fewest key blocks so far (greedy list scheduling, as the hardware deals a
    non-persistent grid's CTAs to SMs as others finish). With a fixed deal (item ``i`` to CTA ``i % grid``)
    causal CTAs differ by up to 30 % in work."""
    num_m = math.ceil(d.seqlen_q / block_m)
    parts: list[list[int]] = [[] for _ in range(grid)]
    loads = [(0, cta) for cta in range(grid)]
    for item in range(num_m * d.batch * d.heads):
        load, cta = heapq.heappop(loads)
        parts[cta].append(item)
        blocks = _item_key_blocks(d, item, block_m, block_n, causal, section)
        heapq.heappush(loads, (load + blocks + _ITEM_BLOCKS, cta))
    bounds = [grid + 1]
    for part in parts:
        bounds.append(bounds[-1] + len(part))
    return bounds + [item for part in parts for item in part]


def _schedule(
    config: Variant, d: _Dims, causal: bool, grid: int, section: int, device: torch.device
) -> torch.Tensor | None:
    """The persistent schedule of this shape on ``device``, built on first use; None while
    the current stream captures a CUDA graph and it is not built yet (the copy to the device
    cannot be captured)."""
    import torch

    key = (device, grid, section, d.batch, d.heads, d.seqlen_q, d.seqlen_k,
           config.block_m, config.block_n, causal)  # fmt: skip
    built = _SCHEDULES.get(key)
    if built is not None or torch.cuda.is_current_stream_capturing():
        return built
    entries = _schedule_entries(d, config.block_m, config.block_n, causal, grid, section)
    # A blocking copy: done when .to returns, so any stream may read it. Two threads that
    # both built it keep the first one stored (a graph another thread captured may hold it).
    return _SCHEDULES.setdefault(key, torch.tensor(entries, dtype=torch.int32).to(device))


def _scheduled(
    config: Variant, d: _Dims, causal: bool, q: torch.Tensor
) -> tuple[Variant, torch.Tensor | None, str]:
    """(the variant that runs, its persistent schedule or None, what the detail adds): a
    persistent variant with its schedule, or, while a CUDA graph is being captured before
    that schedule was built, its ``_l`` twin and why."""
    if not config.persistent:
        return config, None, ""
    (grid,), section = _grid(config, d, q.element_size(), q.device.index)
    sched = _schedule(config, d, causal, grid, section, q.device)
    if sched is not None:
        return config, sched, ""
    why = (
        f"; {config.name} runs as its _l twin: a CUDA graph is being captured before this "
        "shape's persistent schedule was built (a call of this shape outside the capture "
        "builds it)"
    )
    return config.twin(lpt=True), None, why


@dataclass(frozen=True)
class Fp8Scales:
    """The fp8 kernel's float32 scales, contiguous: ``q`` (batch, heads, query blocks of
    64 rows; or one block, read for every row block, as the kernel clamps the index to the
    last), ``k`` (batch, kv_heads, key blocks of ``k_block`` rows), ``v`` (batch, kv_heads,
    head_dim), or (batch, kv_heads) for one a head (:attr:`v_per_head`); real = e4m3 value
    · scale."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    k_block: int

    @property
    def v_per_head(self) -> bool:
        """The value's scale is one a (batch, key/value head), which the kernel folds into
        the rows' normalisation (one multiply a row instead of one a value, and one load)."""
        return self.v.dim() == 2


def _kernel_args(
    config: Variant,
    d: _Dims,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    cu_seqlens: tuple[torch.Tensor, torch.Tensor] | None,
    fp8: Fp8Scales | None,
    sched: torch.Tensor | None,
    section: int,
) -> tuple[Any, ...]:
    """The runtime arguments of :func:`_launch`'s kernel, ``section`` being :func:`_grid`'s."""
    if config.persistent and sched is None:
        raise XpuRuntimeError(f"hopper attention: {config.name} launched without its schedule")
    cu_q, cu_k = cu_seqlens if cu_seqlens is not None else (out, out)  # unused when dense
    scales = (fp8.q, fp8.k, fp8.v) if fp8 is not None else (lse, lse, lse)  # unused: 16-bit
    return (
        _descriptor(q, config.block_m_wg),
        _descriptor(k, config.block_n),
        _descriptor(v, d.head_dim, config.block_n) if fp8 else _descriptor(v, config.block_n),
        _descriptor(out, config.block_m_wg),
        out, lse, cu_q, cu_k, *scales, sched if sched is not None else lse,  # unused: 2-D
        out.stride(2), out.stride(1), lse.stride(-2), d.seqlen_q, d.seqlen_k, d.heads,
        d.heads // d.kv_heads, d.batch * d.heads, section,
        fp8.q.shape[2] if fp8 is not None else 0, fp8.k.shape[2] if fp8 is not None else 0,
        scale * _LOG2E,
    )  # fmt: skip


def kernel_constants(
    config: Variant,
    head_dim: int,
    causal: bool,
    *,
    varlen: bool,
    k_scale_block: int | None,
    v_per_head: bool = False,
) -> dict[str, Any]:
    """The kernel's compile-time arguments for ``config`` (``k_scale_block``: the fp8 key
    scales' block, None for 16-bit inputs; ``v_per_head``: :attr:`Fp8Scales.v_per_head`);
    the offline compile script builds the same."""
    if config.sum_mma and k_scale_block is None:
        raise InvalidArgumentError(
            f"hopper attention variant {config.name!r}: the sums' GEMM (u) is a variant of the "
            "fp8 kernel; 16-bit P measured slower with it (its GEMMs, not the softmax, bound "
            "a block). Choose the variant without u"
        )
    return {
        "HEAD_DIM": head_dim,
        "BLOCK_M_WG": config.block_m_wg,
        "BLOCK_N": config.block_n,
        "NUM_STAGES": config.num_stages,
        "CAUSAL": causal,
        "PINGPONG": config.pingpong,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.producer_regs,
        "NUM_WG": config.num_wg,
        "Q_BUFFERS": config.q_buffers,
        "PERSISTENT": config.persistent,
        "LPT": config.lpt,
        "VARLEN": varlen,
        "EXP_MODE": config.exp_mode,
        "P_F32": k_scale_block is not None,
        "LAZY": config.lazy,
        "ONE_GEMM": config.one_gemm,
        "SUM_MMA": config.sum_mma,
        "SUM_COLUMNS": SUM_COLUMNS,
        "V_PER_HEAD": v_per_head,
        "K_SCALE_BLOCK": k_scale_block if k_scale_block is not None else config.block_n,
    }


@dataclass(frozen=True, slots=True)
class _Launched:
    """What :func:`_launch` launched: the kept kernel (None where none is kept), the grid,
    the L2 section (:func:`_grid`'s) and the runtime arguments (:func:`_kernel_args`'s)."""

    kept: gluon_launch.Kept | None
    grid: tuple[int, ...]
    section: int
    args: tuple[Any, ...]


def _launch(
    config: Variant,
    d: _Dims,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
    cu_seqlens: tuple[torch.Tensor, torch.Tensor] | None,
    fp8: Fp8Scales | None = None,
    sched: torch.Tensor | None = None,
) -> _Launched:
    """Launch on the current stream. ``q``, ``k``, ``v`` and ``out`` are 4-D (batch, heads,
    seq, head_dim) views, (1, heads, total, head_dim) when ``cu_seqlens`` is given; with
    ``fp8`` the inputs are e4m3 and ``v`` is transposed, (batch, kv_heads, head_dim, seq).
    ``sched``: the persistent variant's schedule (:func:`_schedule`) for this grid, which a
    persistent ``config`` needs.
    :func:`.gluon_launch.launch` keeps the kernel the JIT compiled for the first call of its
    kind and launches it directly afterwards; it is returned with the launch's grid and
    arguments."""
    from xpuruntime.kernels.attention import _hopper_kernels

    grid, section = _grid(config, d, q.element_size(), q.device.index)
    args = _kernel_args(config, d, q, k, v, out, lse, scale, cu_seqlens, fp8, sched, section)
    constants = kernel_constants(
        config, d.head_dim, causal, varlen=cu_seqlens is not None,
        k_scale_block=fp8.k_block if fp8 is not None else None,
        v_per_head=fp8 is not None and fp8.v_per_head,
    )  # fmt: skip
    kept = gluon_launch.launch(
        _hopper_kernels._xrt_attn_fwd_hopper, grid, args, constants, maxnreg=config.maxnreg
    )
    return _Launched(kept, grid, section, args)


@dataclass(frozen=True)
class ForwardRun:
    """What :func:`hopper_attention_forward_run` computed and ran: ``variant`` is None when no
    kernel ran (no query row or no key), and ``why`` says why this variant."""

    out: torch.Tensor
    lse: torch.Tensor
    variant: Variant | None
    why: str


@dataclass(frozen=True, slots=True)
class Relaunch:
    """A dense launch to repeat on other tensors of the same shapes, strides, dtypes and
    16-byte alignment (the caller's key must guarantee it, as :func:`_repeat_key` does for
    the 16-bit forward and :func:`.fp8._repeat_key` for the fp8 one): :meth:`launch` runs
    the same variant with the same schedule, grid and L2 section (``section``,
    :func:`_grid`'s) through ``replay``, the kept kernel's launch laid out once with the
    tensors :func:`_sources` names, skipping the checks, the choice, the launcher's cache
    key and (where the kernel launches directly) the arguments' building: their host time
    was most of a short call's."""

    config: Variant
    dims: _Dims
    scale: float
    sched: torch.Tensor | None
    section: int
    replay: gluon_launch.Replay

    def launch(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        fp8: Fp8Scales | None = None,
    ) -> None:
        """Launch on the current stream with :func:`_launch`'s tensors (dense)."""
        self.replay.launch(
            _sources(q, k, v, out, lse, fp8),
            lambda: _kernel_args(
                self.config, self.dims, q, k, v, out, lse, self.scale, None, fp8, self.sched,
                self.section,
            ),
        )  # fmt: skip


def _sources(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    fp8: Fp8Scales | None,
) -> tuple[torch.Tensor, ...]:
    """The tensors a :class:`Relaunch` takes anew each time."""
    return (q, k, v, out, lse) if fp8 is None else (q, k, v, out, lse, fp8.q, fp8.k, fp8.v)


def _relaunch(
    config: Variant,
    d: _Dims,
    scale: float,
    sched: torch.Tensor | None,
    launched: _Launched,
    sources: tuple[torch.Tensor, ...],
) -> Relaunch | None:
    """The :class:`Relaunch` of a dense launch on ``sources`` (:func:`_sources`); None where
    no kernel was kept."""
    if launched.kept is None:
        return None
    replay = launched.kept.replay(launched.grid, launched.args, sources)
    return Relaunch(config, d, scale, sched, launched.section, replay)


@dataclass(frozen=True, slots=True)
class _Repeat:
    """What a dense forward call decided and launched, for the next call with the same
    :func:`_repeat_key`: that call runs :attr:`relaunch` on its tensors and reports ``why``
    as the first call did."""

    relaunch: Relaunch
    why: str

    def run(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None
    ) -> ForwardRun | None:
        """The repeated call's result; None (nothing launched) where a new allocation is
        not 16-byte aligned as the kept kernel takes it (an allocator other than PyTorch's
        default): the caller then decides afresh."""
        import torch

        d = self.relaunch.dims
        target = torch.empty_like(q) if out is None else out
        lse = q.new_empty((d.batch, d.heads, d.seqlen_q), dtype=torch.float32)
        if (target.data_ptr() | lse.data_ptr()) % 16:
            return None
        self.relaunch.launch(q, k, v, target, lse)
        return ForwardRun(target, lse, self.relaunch.config, self.why)


#: Dense calls' decisions by :func:`_repeat_key`.
_REPEATS: gluon_launch.Repeats[_Repeat] = gluon_launch.Repeats()


def _repeat_key(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor | None,
    causal: bool,
    scale: float | None,
    variant: str | None,
    stream: int | None,
) -> tuple[Any, ...] | None:
    """The key of a dense call in :data:`_REPEATS`, or None where a call cannot repeat an
    earlier one: a stream given, a scale other than a float or None, an input or output
    address not 16-byte aligned, a device other than the current one, a kernel with Triton
    pre-run hooks. Everything the checks, the variant's choice and the launch's arguments
    and specialisation depend on is in it (shapes, strides, dtypes and devices, the mask, the
    scale, the variant asked for and its environment variable, Triton's debug and
    instrumentation settings), the addresses only through their alignment."""
    import torch

    if stream is not None or not (scale is None or type(scale) is float):
        return None
    if (q.data_ptr() | k.data_ptr() | v.data_ptr() | (0 if out is None else out.data_ptr())) % 16:
        return None
    if q.device.type != "cuda" or q.device.index != torch.cuda.current_device():
        return None
    from xpuruntime.kernels.attention import _hopper_kernels

    settings = gluon_launch.relaunch_key(_hopper_kernels._xrt_attn_fwd_hopper)
    if settings is None:
        return None
    return (
        q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
        v.shape, v.stride(), v.dtype, v.device,
        None if out is None else (out.shape, out.stride(), out.dtype, out.device),
        causal, scale, variant, os.environ.get(VARIANT_ENV), settings,
    )  # fmt: skip


def hopper_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    variant: str | None = None,
    stream: int | None = None,
    out: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, log-sum-exp): :func:`hopper_attention_forward_run`'s, which see."""
    run = hopper_attention_forward_run(
        q, k, v, causal=causal, scale=scale, variant=variant, stream=stream, out=out,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
    )  # fmt: skip
    return run.out, run.lse


def hopper_attention_forward_run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    variant: str | None = None,
    stream: int | None = None,
    out: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
) -> ForwardRun:
    """The output and log-sum-exp of softmax(scale · Q Kᵀ) V on an H100/H200, and the variant
    that ran.

    ``q`` is (batch, heads, seqlen_q, head_dim), ``k`` and ``v`` (batch, kv_heads, seqlen_k,
    head_dim), bfloat16 or float16, head size 64, 128 or 256; any strides with a unit-stride
    head dimension (a (batch, seq, heads, dim) tensor passes as ``x.transpose(1, 2)``).
    Causal masking is top-left aligned (query ``i`` sees keys ``j <= i``), as SDPA's
    ``is_causal``. The output has the query's shape, dtype and strides; the log-sum-exp is
    float32 (batch, heads, seqlen_q), natural log, as :func:`.launch.forward` returns it.

    Packed variable-length batches: with ``cu_seqlens_q``/``cu_seqlens_k`` (int32, batch + 1
    offsets on the inputs' device) ``q`` is (total_q, heads, head_dim) and ``k``, ``v``
    (total_k, kv_heads, head_dim), sequence ``i`` being rows ``cu[i]:cu[i+1]``; causal
    masking is top-left within each sequence, and the log-sum-exp is (heads, total_q), as
    :func:`.launch.forward` returns them for ``layout="thd"`` (rows of no sequence are left
    unwritten there too). ``max_seqlen_q``/``max_seqlen_k`` (the longest lengths) size the
    grid; without them they are read from the offsets (a device sync). A sequence's last key
    tile reads the rows after it (the next sequence's, or rows past ``cu_seqlens_k[-1]``) with
    weight 0, so those must hold finite numbers (0 · NaN is NaN), as real tokens do; xrt_flash
    does not read them.

    ``variant`` (default: ``XPURUNTIME_HOPPER_ATTENTION_VARIANT``, else :data:`_DEFAULTS`, or
    for packed batches :data:`_PACKED_DEFAULTS`, by head size, mask and key length) picks
    the tiles and schedule. A persistent or ``_l`` variant runs as its 2-D twin on packed
    batches, and a persistent one as its ``_l`` twin while a CUDA graph is captured before
    the shape's schedule is built (a call of that shape outside the capture builds it); the
    result says which ran. ``stream`` (a raw ``cudaStream_t``; default: the current
    stream) is the stream the work runs on; the current stream is left as it was. ``out``
    (the query's shape, dtype and device) receives the output and is returned; when TMA cannot
    address it (unaligned strides), the kernel writes a temporary that is then copied there.
    """
    import torch

    q, scale = query_for_scale(q, scale, stream)
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    repeat_key = None if packed else _repeat_key(q, k, v, out, causal, scale, variant, stream)
    if repeat_key is not None:
        repeat = _REPEATS.get(repeat_key)
        repeated = None if repeat is None else repeat.run(q, k, v, out)
        if repeated is not None:
            return repeated
    cu_seqlens = None
    if packed:
        cu_q, cu_k, seqlen_q, seqlen_k = _packed_lengths(
            q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k
        )
        cu_seqlens = (cu_q, cu_k)
    _check(q, k, v, packed)
    if packed:
        d = _Dims(cu_q.numel() - 1, q.shape[1], k.shape[1], seqlen_q, seqlen_k, q.shape[2])
    else:
        d = _Dims(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
    if out is not None:
        _check_out(out, q)
    # Triton only past the checks; launch's stream context is the one xrt_flash uses.
    from xpuruntime.kernels.attention.streams import on_device

    def view(x: torch.Tensor) -> torch.Tensor:
        """The kernel's 4-D view (:func:`rows_as_heads` when packed)."""
        return rows_as_heads(x) if packed else x

    scale = 1.0 / math.sqrt(d.head_dim) if scale is None else float(scale)
    config, why = _variant(d.head_dim, variant, causal, d.seqlen_k, packed)
    if packed and (config.persistent or config.lpt):
        # Packed batches run the variant's 2-D twin: the 1-D work list would give every
        # (sequence, head) as many query tiles as the longest sequence (empty ones skipped in
        # turn), and the persistent head-size-128 build spills at its partitions' entry.
        why += f"; {config.name} runs as its 2-D twin on packed sequences"
        config = config.twin(lpt=False)
    two_d = not (config.persistent or config.lpt)
    if two_d and d.batch * d.heads > 65535:  # the grid's second dimension
        raise UnsupportedOperationError(
            f"hopper attention launches one CTA row per (batch, head): {d.batch * d.heads} is "
            "past CUDA's 65535 limit on a grid's y dimension"
        )
    with on_device(q.device, stream):
        q4, k4, v4 = (_tma_ready(view(x)) for x in (q, k, v))
        # The kernel's output: the caller's tensor when TMA can address it, else one with the
        # query's (TMA-ready) strides, copied into ``out`` afterwards.
        if out is not None and tma_addressable(view(out)):
            target = out
        elif packed:
            target = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        else:
            target = torch.empty_like(q4)
        if packed:
            lse = torch.empty((d.heads, q.shape[0]), dtype=torch.float32, device=q.device)
            no_query = d.batch == 0 or d.heads == 0 or d.seqlen_q == 0 or q.shape[0] == 0
            no_key = d.seqlen_k == 0 or k.shape[0] == 0
        else:
            lse = torch.empty((d.batch, d.heads, d.seqlen_q), dtype=torch.float32, device=q.device)
            no_query = target.numel() == 0
            no_key = d.seqlen_k == 0
        ran: Variant | None = None
        if no_query:  # no row to compute (packed: rows of no sequence are left as they are)
            lse.fill_(float("-inf"))
            why = "no kernel: no query row"
        elif no_key:  # nothing to attend to: zeros and -inf, as the Triton forward returns
            target.zero_()
            lse.fill_(float("-inf"))
            why = "no kernel: no key"
        else:
            config, sched, twin = _scheduled(config, d, causal, q4)
            why += twin
            launched = _launch(config, d, q4, k4, v4, view(target), lse, causal, scale,
                               cu_seqlens, sched=sched)  # fmt: skip
            ran = config
            # The next call with this key repeats this one, if this one ran on the tensors as
            # given (no copy for TMA) and its choice holds outside a graph capture.
            as_given = q4 is q and k4 is k and v4 is v and (out is None or target is out)
            if repeat_key is not None and as_given and not twin:
                relaunch = _relaunch(
                    config, d, scale, sched, launched, _sources(q, k, v, target, lse, None)
                )
                if relaunch is not None:
                    _REPEATS.keep(repeat_key, _Repeat(relaunch, why))
        if out is not None and target is not out:
            out.copy_(target)
    return ForwardRun(target if out is None else out, lse, ran, why)


FP8_VARIANT_ENV = "XPURUNTIME_HOPPER_FP8_VARIANT"
#: Query rows per scale of the fp8 kernel: one consumer warpgroup's tile.
FP8_QUERY_BLOCK = 64


def fp8_variant(head_dim: int, given: str | None = None) -> Variant:
    """The fp8 kernel's variant: ``given``, else ``XPURUNTIME_HOPPER_FP8_VARIANT``, else the
    head size's first candidate; checked against what the fp8 kernel takes."""
    return _checked_fp8_variant(
        head_dim, given or os.environ.get(FP8_VARIANT_ENV) or _FP8_VARIANTS[head_dim][0]
    )


@functools.lru_cache(maxsize=64)  # on every call's path (twice): the checks do not change
def _checked_fp8_variant(head_dim: int, name: str) -> Variant:
    config = parse_variant(name)
    if config.block_m_wg != FP8_QUERY_BLOCK or config.num_wg != 2:
        raise InvalidArgumentError(
            f"hopper fp8 attention variant {name!r}: the query scales are per "
            f"{FP8_QUERY_BLOCK} rows, so a consumer warpgroup takes {FP8_QUERY_BLOCK} rows "
            "(m64); the fp8 kernel runs two consumer warpgroups (three spill)"
        )
    if config.ctas_per_sm != 1:
        raise InvalidArgumentError(
            f"hopper fp8 attention variant {name!r}: the fp8 kernel carries P in float32 "
            "between blocks, which two CTAs an SM (o2) leave no registers for"
        )
    if config.smem_bytes(head_dim, 1) > config.smem_limit():
        raise InvalidArgumentError(
            f"hopper fp8 attention variant {name!r} needs {config.smem_bytes(head_dim, 1)} "
            f"bytes of shared memory at head size {head_dim}; a CTA has {config.smem_limit()}"
        )
    return config


def hopper_fp8_forward(
    q8: torch.Tensor,
    k8: torch.Tensor,
    vt8: torch.Tensor,
    scales: Fp8Scales,
    *,
    causal: bool,
    scale: float,
    out: torch.Tensor,
    lse: torch.Tensor,
    variant: str | None = None,
) -> tuple[Variant, str, Relaunch | None]:
    """Attention on e4m3 inputs into ``out`` and ``lse``; returns the variant that ran, what
    the detail adds about it ('' or why a persistent variant ran as its ``_l`` twin) and the
    launch to repeat (None where none can be: no kept kernel, or the twin, which ran only for
    want of a schedule during a graph capture).

    ``q8`` (batch, heads, seqlen_q, head_dim) and ``k8`` (batch, kv_heads, seqlen_k,
    head_dim) are e4m3 views whose last dimension is contiguous; ``vt8`` is the value
    transposed, (batch, kv_heads, head_dim, keys) with the keys contiguous (fp8 wgmma reads
    both operands K-major), **in the kernel's key order** (:data:`.fp8.HOPPER_KEY_ORDER`: a
    value in sequential order gives wrong results) over whole groups of 32 keys, the
    padding past ``seqlen_k`` zero (:func:`.fp8.quantize` and :func:`.fp8.from_fp8` write
    it so); all TMA-addressable (:func:`tma_addressable`).
    ``out`` is the (batch, heads, seqlen_q, head_dim) 16-bit output view, ``lse`` float32
    (batch, heads, seqlen_q). The caller (:func:`.fp8.forward`) has checked the device
    (sm_90), shapes and scales; this picks the variant and launches on the current
    stream."""
    d = _Dims(q8.shape[0], q8.shape[1], k8.shape[1], q8.shape[2], k8.shape[2], q8.shape[3])
    if vt8.shape[-1] % 32 or vt8.shape[-1] < d.seqlen_k:
        raise InvalidArgumentError(
            f"hopper fp8 attention: the transposed value must cover the {d.seqlen_k} keys in "
            f"whole groups of 32 (fp8.quantize writes it so), got {vt8.shape[-1]}"
        )
    config = fp8_variant(d.head_dim, variant)
    if scales.k_block % config.block_n:
        raise InvalidArgumentError(
            f"hopper fp8 attention: key scales per {scales.k_block} rows do not cover whole "
            f"key blocks of {config.block_n} (variant {config.name})"
        )
    q8, scale = query_for_scale(q8, scale, None)  # (fp8.forward has done it: scale >= 0)
    config, sched, twin = _scheduled(config, d, causal, q8)
    launched = _launch(config, d, q8, k8, vt8, out, lse, causal, scale, None, scales, sched)
    if twin:
        return config, twin, None
    sources = _sources(q8, k8, vt8, out, lse, scales)
    return config, twin, _relaunch(config, d, scale, sched, launched, sources)
