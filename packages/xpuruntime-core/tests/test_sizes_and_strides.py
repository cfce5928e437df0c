"""Checked sizes (issue 10) and strided views through the ops, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.runtime import memory


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**62], r"2\^62-byte limit"),
        ([2**40, 2**40], "more than 2\\^63 - 1 elements"),
        ([3, -1], "negative dimension"),
        ([2**64], "does not fit in 64 bits"),
        ([2.5], "is not an int"),
    ],
)
def test_empty_rejects_sizes_that_overflow(shape: list[int], message: str) -> None:
    with pytest.raises(rt.InvalidArgumentError, match=message):
        rt.empty(shape, "float32", "cpu")


def test_empty_zero_sized_huge_shape_is_fine() -> None:
    t = rt.empty([2**62, 0], "float32", "cpu")
    assert t.nbytes == 0
    assert t.numel == 0


def test_pinned_empty_checks_its_size() -> None:
    with pytest.raises(rt.InvalidArgumentError, match="nbytes must be an int >= 0"):
        memory.pinned_empty(-1)
    with pytest.raises(rt.XpuRuntimeError):  # 2^62-byte limit, or no CUDA in this build
        memory.pinned_empty(2**63)


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
def test_matmul_takes_transposed_views(layout: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    a_in = np.ascontiguousarray(a.T).T if layout[0] == "T" else a
    b_in = np.ascontiguousarray(b.T).T if layout[1] == "T" else b
    c = ops.matmul(a_in, b_in)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    decision = ops.last_decision()
    assert decision is not None
    assert decision.layout == layout


def test_matmul_transpose_of_itself() -> None:
    a = np.arange(12, dtype=np.float64).reshape(4, 3)
    np.testing.assert_allclose(ops.matmul(a.T, a), a.T @ a)


def test_matmul_any_strides_on_the_cpu() -> None:
    base = np.arange(96, dtype=np.float64).reshape(8, 12)
    a = base[::2, ::3]  # neither stride is 1
    b = base[:4, 1::3].T.copy()[:, ::-1]  # negative strides
    np.testing.assert_allclose(ops.matmul(a, b), a @ b)
    decision = ops.last_decision()
    assert decision is not None
    assert decision.layout.startswith("S")


def test_batched_matmul_and_broadcast() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 4, 5))
    b = rng.standard_normal((3, 5, 2))
    np.testing.assert_allclose(ops.matmul(a, b), a @ b)
    w = rng.standard_normal((5, 6))
    np.testing.assert_allclose(ops.matmul(a, w), a @ w)  # folded into one [12, 5] GEMM
    np.testing.assert_allclose(ops.matmul(a.transpose(0, 2, 1).copy().transpose(0, 2, 1), w), a @ w)
    with pytest.raises(rt.InvalidArgumentError, match="batch sizes differ"):
        ops.matmul(a, rng.standard_normal((2, 5, 2)))


def test_layernorm_names_contiguous_for_strided_input() -> None:
    x = np.ones((4, 8), np.float32)[:, ::2]
    w = np.ones(4, np.float32)
    with pytest.raises(rt.UnsupportedOperationError, match=r"call \.contiguous\(\)"):
        ops.layernorm(x, w, w)
