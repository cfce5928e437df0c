"""DLPack on the CPU: zero copy with numpy (and PyTorch when installed), typed errors."""

from __future__ import annotations

import numpy as np
import pytest

import xpuruntime.runtime as rt


def test_numpy_round_trip_shares_memory() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = rt.from_dlpack(a)
    assert t.data_ptr == a.ctypes.data
    assert t.shape == (3, 4)
    assert t.dtype == "float32"
    assert t.device == "cpu"
    assert t.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(t)
    assert back.ctypes.data == a.ctypes.data
    a[0, 0] = 42.0
    assert back[0, 0] == 42.0


def test_view_keeps_the_producer_alive() -> None:
    t = rt.from_dlpack(np.full(1024, 7.0))
    back = np.from_dlpack(t)
    del t
    assert back.sum() == 7.0 * 1024


def test_every_supported_dtype_round_trips() -> None:
    for dtype in ("float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"):
        a = np.ones(5, dtype=dtype)
        t = rt.from_dlpack(a)
        assert t.dtype == dtype
        assert np.from_dlpack(t).dtype == a.dtype


def test_strided_views_keep_their_strides_both_ways() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    t = rt.from_dlpack(a)
    assert t.shape == (4, 3)
    assert t.strides == (6, 2)  # elements, as DLPack counts them
    assert not t.is_contiguous
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    assert back.ctypes.data == a.ctypes.data
    transposed = rt.from_dlpack(np.ones((3, 5), np.float32).T)
    assert transposed.strides == (1, 5)
    assert rt.from_dlpack(np.ascontiguousarray(a)).is_contiguous


def test_unsupported_dtype_is_rejected_with_choices() -> None:
    with pytest.raises(
        rt.UnsupportedOperationError, match=r"complex128.*supported dtypes: float32"
    ):
        rt.from_dlpack(np.zeros(3, dtype=np.complex128))


def test_objects_without_dlpack_are_rejected() -> None:
    with pytest.raises(rt.UnsupportedOperationError, match="needs an object with __dlpack__"):
        rt.from_dlpack([1.0, 2.0])


def test_capsule_can_be_consumed_once() -> None:
    capsule = np.zeros(3, dtype=np.float32).__dlpack__()
    rt.from_dlpack(capsule)
    with pytest.raises(rt.UnsupportedOperationError, match="consumed only once"):
        rt.from_dlpack(capsule)


def test_empty_allocates_aligned_cpu_storage() -> None:
    t = rt.empty([8, 8], "float64")
    assert t.nbytes == 512
    assert t.data_ptr % 64 == 0
    with pytest.raises(rt.InvalidArgumentError, match="did you mean 'float32'"):
        rt.empty([2], "float23")
    with pytest.raises(rt.InvalidArgumentError, match="invalid device"):
        rt.empty([2], "float32", "tpu")


def test_torch_cpu_round_trip_shares_memory() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = rt.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    bf = rt.from_dlpack(torch.ones(4, dtype=torch.bfloat16))
    assert bf.dtype == "bfloat16"
    assert torch.from_dlpack(bf).dtype == torch.bfloat16
    t = rt.from_dlpack(x.t())
    assert t.strides == (1, 3)
    assert torch.equal(torch.from_dlpack(t), x.t())
