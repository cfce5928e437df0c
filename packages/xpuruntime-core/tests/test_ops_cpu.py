"""CPU reference kernels through xpuruntime.ops, dispatched under kernel policies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.record import ExecutionRecord


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_matches_numpy(dtype: type[np.floating[Any]]) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 53)).astype(dtype)
    b = rng.standard_normal((53, 29)).astype(dtype)
    c = ops.matmul(a, b)
    assert isinstance(c, np.ndarray)
    assert c.dtype == dtype
    np.testing.assert_allclose(c, a @ b, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4)


def test_matmul_large_enough_to_use_threads() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 300)).astype(np.float32)
    b = rng.standard_normal((300, 128)).astype(np.float32)
    np.testing.assert_allclose(ops.matmul(a, b), a @ b, rtol=1e-4, atol=1e-3)


def test_layernorm_matches_numpy() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    y = ops.layernorm(x, w, b, 1e-5)
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * w + b, rtol=1e-5, atol=1e-5)


def test_bad_shapes_and_mixed_dtypes_are_explained() -> None:
    a = np.ones((2, 3), np.float32)
    with pytest.raises(rt.InvalidArgumentError, match="inner dimensions differ"):
        ops.matmul(a, a)
    with pytest.raises(rt.InvalidArgumentError, match="a is float32 but b is float64"):
        ops.matmul(a, np.ones((3, 2)))
    with pytest.raises(rt.InvalidArgumentError, match="2-D or 3-D"):
        ops.matmul(np.ones(3, np.float32), a)
    with pytest.raises(rt.InvalidArgumentError, match=r"weight and bias must have shape \[3\]"):
        ops.layernorm(a, np.ones(2, np.float32), np.ones(3, np.float32))


def test_pin_that_cannot_run_raises_and_allocates_nothing() -> None:
    a = np.ones((2, 2), np.float32)
    with pytest.raises(rt.UnsupportedOperationError, match="pins matmul to 'cublasLt'"):
        ops.matmul(a, a, policy=KernelPolicy(matmul="cublasLt"))
    with pytest.raises(rt.UnsupportedOperationError, match="float32/float64 only, got float16"):
        ops.matmul(a.astype(np.float16), a.astype(np.float16), policy=KernelPolicy(matmul="cpu"))


def test_prefer_falls_back_and_records_why() -> None:
    a = np.ones((2, 2), np.float32)
    record = ExecutionRecord(kind="inference")
    policy = KernelPolicy().set("matmul", "cublas", mode="prefer")
    ops.matmul(a, a, policy=policy, record=record)
    (decision,) = record.decisions
    assert decision.kernel == "cpu"
    assert decision.mode == "prefer"
    assert "preferred 'cublas' cannot run" in decision.reason
    last = ops.last_decision()
    assert last is not None
    assert last.kernel == "cpu"


def test_result_of_xpuruntime_tensors_is_a_tensor() -> None:
    a = rt.from_dlpack(np.eye(3, dtype=np.float32))
    c = ops.matmul(a, a)
    assert type(c).__name__ == "Tensor"
    np.testing.assert_array_equal(np.from_dlpack(c), np.eye(3))
