from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

import xpuruntime.runtime as rt
from xpuruntime.runtime import memory


def test_stats_have_the_documented_keys() -> None:
    stats = memory.stats()
    for key in ("allocated", "reserved", "peak", "driver_allocations", "fragmentation", "cached"):
        assert key in stats
    assert 0.0 <= stats["fragmentation"] <= 1.0


def test_size_classes_are_512_byte_multiples() -> None:
    assert memory.size_class(1) == 512
    assert memory.size_class(1000) == 1024
    assert memory.size_class(5000) == 5120
    # No coarser classes for large requests: best fit with splitting takes the rest back.
    assert memory.size_class((8 << 20) + 1) == (8 << 20) + 512
    assert memory.size_class(123_456_789) == 123_457_024


def test_pluggable_allocator_library_exports_the_symbols() -> None:
    path = memory.pluggable_allocator_path()
    assert Path(path).is_file()
    lib = ctypes.CDLL(path)
    for symbol in memory.PLUGGABLE_ALLOCATOR_SYMBOLS:
        assert hasattr(lib, symbol)


def test_device_memory_without_a_gpu_is_a_typed_error() -> None:
    if rt.cuda_available():
        pytest.skip("this machine has a GPU; the GPU tests cover allocation")
    with pytest.raises((rt.CudaError, rt.InvalidArgumentError)):
        rt.empty([4], "float32", "cuda")
    with pytest.raises((rt.CudaError, rt.InvalidArgumentError), match="CUDA"):
        rt.Stream()
