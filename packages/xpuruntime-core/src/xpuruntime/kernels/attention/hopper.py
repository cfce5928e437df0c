"""Host side of the Gluon Hopper forward (:mod:`._hopper_kernels`): checks, variants, launch.

Imported only when the kernel runs: torch and Triton are imported inside the functions that
need them, so this module (and ``import xpuruntime``) stays light; the variant table is
plain data that the offline compile script reads without torch.

Variants name the tiles and the schedule: ``m{rows per consumer warpgroup}n{key block}
s{ring stages}{pp|np}`` (``pp``: the two consumer warpgroups ping-pong their GEMMs; ``np``:
they issue freely). ``XPURUNTIME_HOPPER_ATTENTION_VARIANT`` overrides the default per head
size, so one GPU run can time them all.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError

if TYPE_CHECKING:
    import torch

__all__ = [
    "HEAD_DIMS",
    "VARIANT_ENV",
    "Variant",
    "hopper_attention_forward",
    "parse_variant",
    "variant_names",
]

VARIANT_ENV = "XPURUNTIME_HOPPER_ATTENTION_VARIANT"
_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class Variant:
    """One compiled shape of the kernel (see the module docstring for the name)."""

    block_m_wg: int
    block_n: int
    num_stages: int
    pingpong: bool
    consumer_regs: int = 240
    producer_regs: int = 24

    @property
    def name(self) -> str:
        schedule = "pp" if self.pingpong else "np"
        return f"m{self.block_m_wg}n{self.block_n}s{self.num_stages}{schedule}"


#: Candidates per head size, default first. All compile for sm_90a without spills
#: (``scripts/hopper_attention_compile.py``); which is fastest is for a GPU run to say.
_VARIANTS: dict[int, tuple[str, ...]] = {
    64: ("m64n128s2pp", "m64n128s2np", "m64n128s3pp", "m128n64s2pp"),
    128: ("m64n128s2pp", "m64n128s2np", "m64n64s3pp", "m64n128s3pp"),
    256: ("m64n64s2pp", "m64n64s2np"),
}
HEAD_DIMS = tuple(_VARIANTS)


def variant_names(head_dim: int) -> tuple[str, ...]:
    """The candidate variants of ``head_dim``, default first."""
    return _VARIANTS[head_dim]


def parse_variant(name: str) -> Variant:
    """``m64n128s2pp`` -> Variant(64, 128, 2, pingpong=True)."""
    match = re.fullmatch(r"m(\d+)n(\d+)s(\d+)(pp|np)", name.strip())
    if match is None:
        raise InvalidArgumentError(
            f"hopper attention variant {name!r} is not of the form m<rows>n<keys>s<stages>pp|np"
        )
    rows, keys, stages = (int(match.group(i)) for i in (1, 2, 3))
    if rows not in (64, 128) or keys not in (64, 128) or stages not in (2, 3, 4):
        raise InvalidArgumentError(
            f"hopper attention variant {name!r}: rows per warpgroup 64/128, key block "
            "64/128, stages 2-4"
        )
    return Variant(rows, keys, stages, match.group(4) == "pp")


def _variant(head_dim: int, given: str | None) -> Variant:
    name = given or os.environ.get(VARIANT_ENV) or _VARIANTS[head_dim][0]
    return parse_variant(name)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise InvalidArgumentError(
            "hopper attention takes (batch, heads, seq, head_dim) query, key and value, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise UnsupportedOperationError(
            "hopper attention supports bfloat16 and float16 (all three alike), got "
            f"{q.dtype}, {k.dtype}, {v.dtype}"
        )
    batch, heads, _, head_dim = q.shape
    if head_dim not in _VARIANTS:
        raise UnsupportedOperationError(
            f"hopper attention supports head sizes {', '.join(map(str, HEAD_DIMS))}, not {head_dim}"
        )
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
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
    major, minor = torch.cuda.get_device_capability(q.device)
    if (major, minor) != (9, 0):
        raise UnsupportedOperationError(
            f"hopper attention is compiled for sm_90a (H100/H200); {q.device} is compute "
            f"capability {major}.{minor}"
        )


def _tma_ready(x: torch.Tensor) -> torch.Tensor:
    """The tensor itself when TMA can address it (unit-stride head dimension, 16-byte aligned
    base and strides), else a contiguous copy."""
    size = x.element_size()
    aligned = x.data_ptr() % 16 == 0 and all((s * size) % 16 == 0 for s in x.stride()[:3])
    return x if x.stride(3) == 1 and aligned else x.contiguous()


def _descriptor(x: torch.Tensor, rows: int) -> Any:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    head_dim = x.shape[3]
    # Both dtypes are 16-bit: the swizzle depends only on a row's bytes (NVMMA's default).
    row_bytes = head_dim * x.element_size()
    swizzle = 128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32
    layout = gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=16, rank=4)
    return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, head_dim], layout)


def hopper_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    variant: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, log-sum-exp) of softmax(scale · Q Kᵀ) V on an H100/H200.

    ``q`` is (batch, heads, seqlen_q, head_dim), ``k`` and ``v`` (batch, kv_heads, seqlen_k,
    head_dim), bfloat16 or float16, head size 64, 128 or 256; any strides with a unit-stride
    head dimension (a (batch, seq, heads, dim) tensor passes as ``x.transpose(1, 2)``).
    Causal masking is top-left aligned (query ``i`` sees keys ``j <= i``), as SDPA's
    ``is_causal``. The output has the query's shape, dtype and strides; the log-sum-exp is
    float32 (batch, heads, seqlen_q), natural log, as :func:`.launch.forward` returns it.
    ``variant`` (default: ``XPURUNTIME_HOPPER_ATTENTION_VARIANT`` or the head size's first)
    picks the tiles and schedule.
    """
    import torch

    _check(q, k, v)
    from xpuruntime.kernels.attention import _hopper_kernels  # Triton: only past the checks

    batch, heads, seqlen_q, head_dim = q.shape
    kv_heads, seqlen_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    config = _variant(head_dim, variant)
    q, k, v = (_tma_ready(x) for x in (q, k, v))
    out = torch.empty_like(q)  # the query's strides: TMA-ready as the query is
    lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    if batch * heads * seqlen_q == 0:
        return out, lse
    if seqlen_k == 0:  # no key: zeros and -inf, as the Triton forward returns
        return out.zero_(), lse.fill_(float("-inf"))
    if batch * heads > 65535:  # the grid's second dimension
        raise UnsupportedOperationError(
            f"hopper attention launches one CTA row per (batch, head): {batch * heads} is past "
            "CUDA's 65535 limit on a grid's y dimension"
        )
    block_m = 2 * config.block_m_wg
    grid = (math.ceil(seqlen_q / block_m), batch * heads)
    with torch.cuda.device(q.device):
        _hopper_kernels._xrt_attn_fwd_hopper[grid](
            _descriptor(q, config.block_m_wg),
            _descriptor(k, config.block_n),
            _descriptor(v, config.block_n),
            _descriptor(out, config.block_m_wg),
            lse,
            seqlen_q,
            seqlen_k,
            heads,
            heads // kv_heads,
            scale * _LOG2E,
            HEAD_DIM=head_dim,
            BLOCK_M_WG=config.block_m_wg,
            BLOCK_N=config.block_n,
            NUM_STAGES=config.num_stages,
            CAUSAL=causal,
            PINGPONG=config.pingpong,
            CONSUMER_REGS=config.consumer_regs,
            PRODUCER_REGS=config.producer_regs,
            num_warps=4,
        )
    return out, lse
