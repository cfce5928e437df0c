"""Fuzz of the allocation and DLPack paths from Python: random shapes, strides, dtypes,
devices and offsets through ``empty`` and ``from_dlpack`` (and the CPU ops on the views that
import). Nothing may crash; failures must be typed errors.

Bounded here (CI); ``XPURUNTIME_FUZZ_EXAMPLES=20000`` runs longer, as the non-default
``native_asan`` nox session does with AddressSanitizer preloaded.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xpuruntime.ops as ops
import xpuruntime.runtime as rt

EXAMPLES = int(os.environ.get("XPURUNTIME_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=EXAMPLES <= 100,  # CI: the same examples every run
)
# What the core may raise for a bad request: its own typed errors, a host allocation the
# machine cannot back (MemoryError), or numpy refusing to export (BufferError).
TYPED = (rt.XpuRuntimeError, MemoryError, BufferError)

dims = st.one_of(
    st.integers(0, 6),
    st.integers(0, 62).map(lambda e: 2**e),
    st.integers(-3, -1),
    st.sampled_from([2**63 - 1, -(2**63), 2**64]),
)
dtypes = st.sampled_from(
    ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool", "f32"]
)
devices = st.sampled_from(["cpu", "cuda", "cuda:3", "gpu", "cuda:-1"])


@FUZZ
@given(shape=st.lists(dims, max_size=5), dtype=dtypes, device=devices)
def test_empty_never_crashes(shape: list[int], dtype: str, device: str) -> None:
    try:
        t = rt.empty(shape, dtype, device)
    except TYPED:
        return
    assert t.nbytes == t.numel * np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize
    assert t.nbytes < 2**62


BUFFER = np.zeros(1 << 14, dtype=np.uint8)


@FUZZ
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    strides=st.lists(st.integers(-3, 5), min_size=4, max_size=4),
    offset=st.integers(0, 2048),
    dtype=st.sampled_from(["float32", "float64", "int32", "uint8", "float16"]),
)
def test_strided_numpy_views_import_and_run(
    shape: list[int], strides: list[int], offset: int, dtype: str
) -> None:
    itemsize = np.dtype(dtype).itemsize
    offset -= offset % itemsize
    byte_strides = [s * itemsize for s in strides[: len(shape)]]
    view = np.lib.stride_tricks.as_strided(
        BUFFER[offset:].view(dtype), shape=shape, strides=byte_strides, writeable=False
    )
    try:
        t = rt.from_dlpack(view)
    except TYPED:
        return
    assert t.shape == tuple(shape)
    norm_weight = np.ones(shape[-1], dtype)
    for op in (
        lambda: ops.matmul(view, view),
        lambda: ops.matmul(view, view.T),
        lambda: ops.linear(view, view, None, "gelu"),
        lambda: ops.layernorm(view, norm_weight, norm_weight),
    ):
        with contextlib.suppress(*TYPED):
            op()


class _Producer:
    """A DLPack producer handing out an arbitrary xpuruntime Tensor's capsule."""

    def __init__(self, tensor: rt.Tensor) -> None:
        self.tensor = tensor

    def __dlpack__(self, **kwargs: object) -> object:
        return self.tensor.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


@FUZZ
@given(shape=st.lists(st.integers(0, 4), max_size=3), dtype=dtypes)
def test_round_trips_through_capsules(shape: list[int], dtype: str) -> None:
    try:
        t = rt.empty(shape, dtype)
    except TYPED:
        return
    back = rt.from_dlpack(_Producer(t))
    assert back.shape == t.shape
    assert back.data_ptr == t.data_ptr
    capsule = t.__dlpack__()
    rt.from_dlpack(capsule)
    with pytest.raises(rt.UnsupportedOperationError, match="consumed only once"):
        rt.from_dlpack(capsule)
