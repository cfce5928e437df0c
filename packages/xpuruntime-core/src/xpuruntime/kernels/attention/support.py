"""What ``xrt_flash``, ``xrt_flash_fp8`` and ``xrt_flash_hopper`` can run, asked by the
dispatcher before anything is imported or compiled.

The dispatcher's query for ``attention`` carries the shape
``[batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, causal, varlen]`` (the two flags as
0/1), the dtype and the device. Answers cost no torch or Triton import unless the device is a
GPU (its compute capability comes from torch).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Sequence

from xpuruntime.kernels.attention.hopper import HEAD_DIMS as HOPPER_HEAD_DIMS
from xpuruntime.kernels.attention.tiles import FP8_HEAD_DIMS, HEAD_DIMS
from xpuruntime.runtime.device import split_device

__all__ = [
    "QUERY_FIELDS",
    "fp8_unsupported_reason",
    "hopper_capability_reason",
    "hopper_query_reason",
    "hopper_unsupported_reason",
    "query_shape",
    "unsupported_reason",
]

QUERY_FIELDS = (
    "batch",
    "seqlen_q",
    "seqlen_k",
    "heads",
    "kv_heads",
    "head_dim",
    "causal",
    "varlen",
)
DTYPES = ("float16", "bfloat16")
MIN_CAPABILITY = (8, 0)
#: The fp8 forward takes these and quantizes them to e4m3 on the way in.
FP8_DTYPES = ("float16", "bfloat16")
#: fp8 tensor-core instructions: Ada (8.9) and Hopper (9.0) onwards.
FP8_MIN_CAPABILITY = (8, 9)
#: The Gluon Hopper forward is compiled for sm_90a: wgmma, TMA and setmaxnreg, none of which
#: a later architecture runs as sm_90a code.
HOPPER_CAPABILITY = (9, 0)


def query_shape(
    *,
    batch: int,
    seqlen_q: int,
    seqlen_k: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    causal: bool,
    varlen: bool,
) -> list[int]:
    """The dispatcher query shape of one attention call."""
    return [batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, int(causal), int(varlen)]


@functools.cache
def _missing_packages() -> str:
    missing = [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]
    if not missing:
        return ""
    return (
        f"needs {' and '.join(missing)} (the kernel is written in Triton and launched on "
        "PyTorch tensors): pip install torch triton (Linux CUDA wheels of torch ship Triton)"
    )


def device_kinds() -> frozenset[str]:
    """Device kinds the kernel runs on: CUDA GPUs, and the CPU only inside Triton's
    interpreter (``TRITON_INTERPRET=1``, for tests)."""
    interpreted = os.environ.get("TRITON_INTERPRET", "0") == "1"
    return frozenset({"cuda", "cpu"} if interpreted else {"cuda"})


@functools.cache
def _capability(index: int) -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def _device_reason(device: str, minimum: tuple[int, int] = MIN_CAPABILITY) -> str:
    needed = f"{minimum[0]}.{minimum[1]}"
    if device == "cpu":
        if os.environ.get("TRITON_INTERPRET", "0") == "1":
            return _missing_packages()  # Triton's CPU interpreter (tests)
        return (
            f"runs on NVIDIA GPUs of compute capability {needed} or newer (the input is on the "
            "CPU; set TRITON_INTERPRET=1 only to test the kernel in Triton's slow CPU "
            "interpreter)"
        )
    spec = split_device(device)
    if spec is None or spec.kind != "cuda":
        return f"runs on CUDA devices, not {device}"
    capability = _capability(spec.ordinal)
    if capability is None:
        return f"PyTorch sees no CUDA device {device}"
    if capability < minimum:
        generations = (
            "Ampere, Ada, Hopper, Blackwell" if minimum < (8, 9) else "Ada, Hopper, Blackwell"
        )
        return (
            f"needs compute capability {needed} or newer ({generations}); {device} "
            f"is {capability[0]}.{capability[1]}"
        )
    return ""


def _shape_reason(op: str, shape: Sequence[int], head_dims: Sequence[int]) -> str:
    if op != "attention":
        return f"implements attention, not {op}"
    if len(shape) != len(QUERY_FIELDS):
        return f"expects the attention query shape [{', '.join(QUERY_FIELDS)}], got {list(shape)}"
    fields = dict(zip(QUERY_FIELDS, shape, strict=True))
    if fields["head_dim"] not in head_dims:
        return f"supports head sizes {', '.join(map(str, head_dims))}, not {fields['head_dim']}"
    heads, kv_heads = fields["heads"], fields["kv_heads"]
    if kv_heads <= 0 or heads % kv_heads:
        return (
            f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads}) "
            "for grouped-query attention"
        )
    return ""


def unsupported_reason(op: str, shape: Sequence[int], dtype: str, device: str) -> str:
    """'' when ``xrt_flash`` can run the query, else why not (shown to the user)."""
    if dtype not in DTYPES and op == "attention" and len(shape) == len(QUERY_FIELDS):
        return f"supports float16 and bfloat16, not {dtype} (cast the inputs, or use autocast)"
    reason = _shape_reason(op, shape, HEAD_DIMS)
    if reason:
        return reason
    if device == "cpu" or not device.startswith("cuda"):
        return _device_reason(device)
    return _missing_packages() or _device_reason(device)


def fp8_unsupported_reason(op: str, shape: Sequence[int], dtype: str, device: str) -> str:
    """'' when ``xrt_flash_fp8`` can run the query, else why not (shown to the user)."""
    if dtype not in FP8_DTYPES and op == "attention" and len(shape) == len(QUERY_FIELDS):
        return f"takes float16/bfloat16 inputs (quantized to float8 e4m3 inside), not {dtype}"
    reason = _shape_reason(op, shape, FP8_HEAD_DIMS)
    if reason:
        return reason
    if device == "cpu" or not device.startswith("cuda"):
        return _device_reason(device, FP8_MIN_CAPABILITY)
    return _missing_packages() or _device_reason(device, FP8_MIN_CAPABILITY)


@functools.cache
def _missing_gluon() -> str:
    # find_spec of a submodule imports its parents (and raises when one is missing): Triton is
    # imported here, on a GPU query only.
    try:
        found = importlib.util.find_spec("triton.experimental.gluon.nvidia.hopper") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return (
            "needs a Triton with Gluon's Hopper support (triton.experimental.gluon.nvidia."
            "hopper), which this Triton lacks"
        )
    return ""


def hopper_query_reason(op: str, shape: Sequence[int], dtype: str, device: str) -> str:
    """'' when ``xrt_flash_hopper`` can run the query as far as its metadata says (op,
    shape, dtype, device kind), else why not; the GPU's compute capability is
    :func:`hopper_capability_reason`'s. Dense and packed variable-length batches alike (its
    forward takes ``cu_seqlens``; their backward is xrt_flash's)."""
    if dtype not in DTYPES and op == "attention" and len(shape) == len(QUERY_FIELDS):
        return f"supports float16 and bfloat16, not {dtype} (cast the inputs, or use autocast)"
    reason = _shape_reason(op, shape, HOPPER_HEAD_DIMS)
    if reason:
        return reason
    spec = split_device(device)
    if spec is None or spec.kind != "cuda":
        where = "the CPU" if device == "cpu" else device
        return (
            f"runs on NVIDIA Hopper GPUs only (compute capability 9.0: H100, H200), not on {where}"
        )
    return ""


def hopper_capability_reason(device: str, capability: tuple[int, int] | None) -> str:
    """'' when a CUDA device of ``capability`` (None: not seen by PyTorch) runs
    ``xrt_flash_hopper``, else why not."""
    if capability is None:
        return f"PyTorch sees no CUDA device {device}"
    if capability != HOPPER_CAPABILITY:
        return (
            f"is compiled for sm_90a only (Hopper: H100, H200), and {device} is compute "
            f"capability {capability[0]}.{capability[1]} (xrt_flash runs other GPUs)"
        )
    return ""


def hopper_unsupported_reason(op: str, shape: Sequence[int], dtype: str, device: str) -> str:
    """'' when ``xrt_flash_hopper`` can run the query, else why not (shown to the user)."""
    reason = hopper_query_reason(op, shape, dtype, device)
    if reason:
        return reason
    spec = split_device(device)
    assert spec is not None  # hopper_query_reason accepted a CUDA device
    return (
        _missing_packages()
        or _missing_gluon()
        or hopper_capability_reason(device, _capability(spec.ordinal))
    )
