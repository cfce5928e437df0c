"""Tile configurations of the attention kernels, per architecture, head size and pass.

Each case lists a few candidates, best first. The first one that compiles is the fixed
configuration (what runs unless tuning is on); tuning times every candidate once per
(pass, architecture, head size, causal, dtype, variable-length) and keeps the fastest. The
lists are short on purpose: each candidate costs one Triton compile (seconds) the first time.

Starting points: FlexAttention's H100/A100 defaults and the Triton tutorial's sweeps
(128x128 tiles with 8 warps for head size 128 on Hopper; 128x64 with 4 warps elsewhere).
``tma`` loads through Hopper's tensor memory accelerator (device-side tensor descriptors);
``ws`` asks Triton to warp-specialise the key loop (producer/consumer warps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FP8_HEAD_DIMS",
    "FP8_SCALE_BLOCK",
    "HEAD_DIMS",
    "Pass",
    "TileConfig",
    "candidates",
    "fp8_candidates",
    "interpreter_tiles",
]

Pass = Literal["forward", "dkdv", "dq"]

#: Head sizes the kernels are compiled for (power-of-two tiles; tl.dot needs >= 16).
HEAD_DIMS = (16, 32, 64, 128, 256)
#: Head sizes of the fp8 forward (an fp8 wgmma step reduces over 32 elements).
FP8_HEAD_DIMS = (64, 128, 256)
#: Rows of one head that share a query or key scale in the fp8 forward; its tiles divide it.
FP8_SCALE_BLOCK = 128


@dataclass(frozen=True)
class TileConfig:
    """One launch configuration. For ``dkdv`` block_n is the key block a program owns and
    block_m the query rows it steps over; for ``forward`` and ``dq`` it is the reverse."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    warp_specialize: bool = False

    def describe(self) -> str:
        extras = (" tma" if self.tma else "") + (
            " warp-specialised" if self.warp_specialize else ""
        )
        return (
            f"BLOCK_M={self.block_m} BLOCK_N={self.block_n} warps={self.num_warps} "
            f"stages={self.num_stages}{extras}"
        )


_T = TileConfig

# (pass, head-size bucket) -> candidates, for Hopper and newer (TMA-capable). The order is
# measured (H100, Triton 3.6, benchmarks/attention_bench.py --tune): the pointer-load 128x64
# forward tiles beat the TMA 128x128 ones at every seqlen (hd128 S8192: 491 against 444
# TFLOP/s), and Triton's warp specialisation of the key loop gains nothing on Hopper (hd128:
# 0.271 against 0.267 ms; it does not compile at all for hd64 with 4 warps).
_HOPPER: dict[tuple[Pass, int], tuple[TileConfig, ...]] = {
    ("forward", 64): (
        _T(128, 64, 4, 3),
        _T(128, 64, 4, 3, tma=True),
        _T(128, 128, 4, 3, tma=True),
        _T(128, 128, 8, 3, tma=True),
    ),
    ("forward", 128): (
        _T(128, 64, 8, 3),
        _T(128, 128, 8, 3, tma=True),
        _T(128, 128, 8, 2, tma=True),
        _T(128, 64, 4, 3, tma=True),
        _T(128, 128, 8, 3, tma=True, warp_specialize=True),
    ),
    ("forward", 256): (_T(64, 64, 4, 2, tma=True), _T(64, 32, 4, 2)),
    ("dkdv", 64): (
        _T(64, 64, 4, 3),
        _T(64, 128, 8, 3),
        _T(32, 128, 4, 3),
        _T(64, 64, 4, 2),
        _T(32, 64, 4, 3),
    ),
    ("dkdv", 128): (_T(64, 64, 4, 2), _T(64, 128, 8, 3), _T(32, 128, 4, 3)),
    ("dkdv", 256): (_T(32, 64, 4, 2), _T(16, 64, 4, 1)),
    ("dq", 64): (_T(128, 64, 8, 3), _T(64, 64, 4, 3), _T(128, 32, 4, 3), _T(128, 64, 8, 2)),
    ("dq", 128): (_T(128, 32, 4, 3), _T(64, 64, 4, 2), _T(128, 64, 8, 3)),
    ("dq", 256): (_T(64, 32, 4, 2), _T(64, 16, 4, 1)),
}

# Ampere / Ada: no TMA, 100-164 KiB of shared memory.
_AMPERE: dict[tuple[Pass, int], tuple[TileConfig, ...]] = {
    ("forward", 64): (_T(128, 64, 4, 3), _T(64, 64, 4, 3)),
    ("forward", 128): (_T(128, 64, 4, 3), _T(128, 32, 4, 3), _T(64, 64, 4, 2)),
    ("forward", 256): (_T(64, 32, 4, 2), _T(32, 32, 4, 1)),
    ("dkdv", 64): (_T(64, 64, 4, 3), _T(32, 128, 4, 2)),
    ("dkdv", 128): (_T(32, 128, 4, 2), _T(32, 64, 4, 2)),
    ("dkdv", 256): (_T(16, 64, 4, 1), _T(16, 32, 4, 1)),
    ("dq", 64): (_T(64, 64, 4, 3), _T(128, 32, 4, 2)),
    ("dq", 128): (_T(128, 32, 4, 2), _T(64, 32, 4, 2)),
    ("dq", 256): (_T(64, 16, 4, 1), _T(32, 16, 4, 1)),
}


def _bucket(head_dim: int) -> int:
    return 64 if head_dim <= 64 else head_dim


def candidates(pass_: Pass, head_dim: int, capability: tuple[int, int]) -> tuple[TileConfig, ...]:
    """The candidates for ``pass_`` at ``head_dim`` on a GPU of ``capability``, best first."""
    table = _HOPPER if capability[0] >= 9 else _AMPERE
    return table[(pass_, _bucket(head_dim))]


# fp8 forward, Hopper. Measured (H100, Triton 3.6, benchmarks/attention_fp8_bench.py --sweep,
# 16k tokens): 64x128 tiles with 4 warps lead at head size 128 at every seqlen (S16384 full:
# 745 TFLOP/s against 635 for 128x128 with 8 warps) and at head size 64 from S4096 full
# (S16384: 518 against 473 for 128x128); at head size 64, 64x64 is faster at S1024-2048 full
# and up to S8192 causal (causal S1024: 274 against 224), a tuning candidate. Head size 256
# is unmeasured.
_FP8_HOPPER: dict[int, tuple[TileConfig, ...]] = {
    64: (_T(64, 128, 4, 3), _T(128, 128, 4, 3), _T(64, 64, 4, 3), _T(128, 64, 4, 3)),
    128: (_T(64, 128, 4, 3), _T(64, 64, 4, 3), _T(128, 128, 8, 3), _T(64, 128, 4, 4)),
    256: (_T(64, 64, 4, 2), _T(64, 128, 4, 2), _T(128, 64, 8, 2)),
}
# Ada (sm_89): fp8 mma, no wgmma, 100 KiB of shared memory.
_FP8_ADA: dict[int, tuple[TileConfig, ...]] = {
    64: (_T(128, 64, 4, 3), _T(64, 64, 4, 3)),
    128: (_T(128, 64, 4, 3), _T(64, 64, 4, 2)),
    256: (_T(64, 32, 4, 2), _T(32, 32, 4, 1)),
}


def fp8_candidates(head_dim: int, capability: tuple[int, int]) -> tuple[TileConfig, ...]:
    """The fp8 forward's candidates at ``head_dim`` on a GPU of ``capability``, best first."""
    table = _FP8_HOPPER if capability[0] >= 9 else _FP8_ADA
    return table[head_dim]


def interpreter_tiles(pass_: Pass) -> tuple[TileConfig, ...]:
    """Small tiles for Triton's CPU interpreter: short test sequences still cross several
    blocks, the causal diagonal and a partial last block."""
    if pass_ == "dkdv":
        return (_T(16, 32, 4, 1),)
    return (_T(32, 16, 4, 1),)
