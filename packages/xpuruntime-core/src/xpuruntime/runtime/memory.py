"""The caching device-memory pool: statistics, cache release, pinned host buffers, and the
C ABI PyTorch's ``CUDAPluggableAllocator`` loads.

To route PyTorch's CUDA allocations through the pool (before the first CUDA allocation)::

    import torch
    from xpuruntime.runtime import memory
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        memory.pluggable_allocator_path(), *memory.PLUGGABLE_ALLOCATOR_SYMBOLS)
    torch.cuda.memory.change_current_allocator(allocator)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpuruntime.runtime.errors import InvalidArgumentError
from xpuruntime.runtime.native import core

if TYPE_CHECKING:
    from xpuruntime.runtime.tensor import Tensor

__all__ = [
    "PLUGGABLE_ALLOCATOR_SYMBOLS",
    "empty_cache",
    "pinned_empty",
    "pluggable_allocator_path",
    "reset_peak_stats",
    "size_class",
    "stats",
]

# (malloc, free) symbol names in the library at pluggable_allocator_path(), with PyTorch's
# signatures: void* malloc(size_t, int device, cudaStream_t) and
# void free(void*, size_t, int device, cudaStream_t).
PLUGGABLE_ALLOCATOR_SYMBOLS = ("xrt_pluggable_malloc", "xrt_pluggable_free")


def stats() -> dict[str, int | float]:
    """Pool statistics.

    allocated/reserved/peak (bytes), cached (bytes in free lists), driver_allocations and
    driver_frees (cudaMalloc/cudaFree calls), allocations and cache_hits, live_blocks,
    cached_blocks, segments (driver allocations currently held, each split into blocks
    best-fit), fragmentation (share of reserved bytes not holding requested data,
    0..1), pinned_reserved and pinned_allocated.
    """
    return dict(core().memory_stats())


def empty_cache() -> None:
    """Return every cached block (device and pinned) to the driver; live tensors stay."""
    core().empty_cache()


def reset_peak_stats() -> None:
    """Restart peak tracking from the current usage."""
    core().reset_peak_stats()


def size_class(nbytes: int) -> int:
    """The number of bytes the pool reserves for a request of ``nbytes``."""
    return int(core().size_class_bytes(nbytes))


def pinned_empty(nbytes: int) -> Tensor:
    """A page-locked host buffer of ``nbytes`` uint8 (cached by size class when freed).

    InvalidArgumentError for a negative size or more than 2^62 bytes.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes < 2**64:
        raise InvalidArgumentError(f"pinned_empty: nbytes must be an int >= 0, got {nbytes!r}")
    tensor: Tensor = core().pinned_empty(nbytes)
    return tensor


def pluggable_allocator_path() -> str:
    """Path of the shared library exporting :data:`PLUGGABLE_ALLOCATOR_SYMBOLS`.

    It is the native module itself, so PyTorch's allocations share this process's pool.
    """
    return str(core().__file__)
