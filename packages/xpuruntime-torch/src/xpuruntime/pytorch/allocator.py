"""xpuruntime's caching pool as PyTorch's CUDA allocator.

PyTorch can only swap its allocator before it initialises CUDA (the first CUDA tensor,
``torch.cuda.init()``, most ``torch.cuda.*`` queries that touch the device): call
:func:`set_allocator` first thing in the process. Afterwards every CUDA tensor lives in the
core's pool and :func:`allocator_stats` shows its counters (``torch.cuda.memory_stats`` does
not: it reports PyTorch's own caching allocator, now unused). CUDA graphs need PyTorch's
allocator (private graph pools), so do not combine them with this one.
"""

from __future__ import annotations

from typing import Any

import torch

from xpuruntime.pytorch._compat import private_api
from xpuruntime.pytorch.errors import AllocatorError
from xpuruntime.runtime import memory

__all__ = ["allocator_stats", "is_allocator_set", "reset_allocator", "set_allocator"]

_original: Any = None
_active = False

_RESTART = (
    "Call it first thing in a fresh process, before any CUDA tensor or torch.cuda call that "
    "initialises the device."
)


def _require_uninitialised(action: str) -> None:
    if not torch.cuda.is_available():
        raise AllocatorError(
            f"{action}: PyTorch {torch.__version__} sees no CUDA device, so there is no CUDA "
            "allocator to replace (CPU tensors use the host allocator)"
        )
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        raise AllocatorError(
            f"{action}: PyTorch has already initialised CUDA and its allocator; PyTorch cannot "
            f"swap an initialised allocator. {_RESTART}"
        )


def set_allocator(enabled: bool = True) -> None:
    """Route PyTorch's CUDA allocations through the core's pool (``enabled=False`` resets)."""
    global _original, _active
    if not enabled:
        reset_allocator()
        return
    if _active:
        return
    _require_uninitialised("set_allocator()")
    _original = private_api(torch.cuda.memory, "_get_current_allocator", "torch.cuda.memory")()
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        memory.pluggable_allocator_path(), *memory.PLUGGABLE_ALLOCATOR_SYMBOLS
    )
    torch.cuda.memory.change_current_allocator(pluggable)
    _active = True


def reset_allocator() -> None:
    """Give PyTorch its own allocator back (only possible before CUDA was initialised)."""
    global _active
    if not _active:
        return
    _require_uninitialised("reset_allocator()")
    torch.cuda.memory.change_current_allocator(_original)
    _active = False


def is_allocator_set() -> bool:
    """True while PyTorch allocates CUDA memory from the core's pool."""
    return _active


def allocator_stats() -> dict[str, int | float]:
    """The core pool's statistics (allocated, reserved, peak_reserved, driver_allocations...)."""
    return memory.stats()
