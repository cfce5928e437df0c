from __future__ import annotations

import time

import pytest

import xpuruntime.runtime as rt
from xpuruntime.policies import BestPerformance, KernelPolicy
from xpuruntime.runtime.native import core


def test_auto_resolves_first_supported_and_logs_once() -> None:
    d1 = rt.dispatcher.resolve("matmul", [8, 8, 8], "float32", "cpu")
    d2 = rt.dispatcher.resolve("matmul", [8, 8, 8], "float32", "cpu")
    assert d1 == d2
    assert d1.kernel == "cpu"
    assert d1.mode == "auto"
    assert "first supported" in d1.reason
    assert "cublasLt" in d1.reason
    (logged,) = rt.dispatcher.decisions()
    assert logged.kernel == "cpu"
    assert logged.shape == "[8, 8, 8]"
    assert logged.device == "cpu"
    assert rt.dispatcher.cache_info() == {"entries": 1, "hits": 1}


def test_best_performance_measures_on_first_use() -> None:
    policy = KernelPolicy(strategy=BestPerformance)
    d = rt.dispatcher.resolve("matmul", [64, 64, 64], "float32", "cpu", policy)
    assert d.kernel == "cpu"


def test_unknown_op_kernel_mode_are_typed_errors() -> None:
    with pytest.raises(rt.UnsupportedOperationError, match="did you mean 'layernorm'"):
        rt.dispatcher.resolve("layernrom", [4], "float32", "cpu")
    # A valid policy kernel that the native core does not implement (PyTorch's own matmul
    # is applied by xpuruntime.pytorch, not dispatched here).
    with pytest.raises(
        rt.UnsupportedOperationError, match="kernels registered for matmul: cublasLt, cublas, cpu"
    ):
        rt.dispatcher.resolve("matmul", [1, 1, 1], "float32", "cpu", KernelPolicy(matmul="torch"))


def test_kernels_and_supports() -> None:
    names = [k.name for k in rt.dispatcher.kernels("matmul")]
    assert names == ["cublasLt", "cublas", "cpu"]
    assert rt.dispatcher.supports("matmul", "cpu", [2, 2, 2], "float32", "cpu") == (True, "")
    ok, why = rt.dispatcher.supports("matmul", "cublasLt", [2, 2, 2], "float32", "cpu")
    assert not ok
    assert why
    assert set(rt.dispatcher.ops()) >= {"matmul", "layernorm"}


def test_cached_resolution_cost_in_cpp_and_python() -> None:
    ns = core().bench_cached_resolve_ns(
        "matmul", [8, 8, 8], "float32", "cpu", "", "auto", "FirstSupported", 100_000
    )
    assert ns < 500, f"cached C++ resolution took {ns:.0f} ns"
    rt.dispatcher.resolve("matmul", [8, 8, 8], "float32", "cpu")
    n = 20_000
    start = time.perf_counter()
    for _ in range(n):
        rt.dispatcher.resolve("matmul", [8, 8, 8], "float32", "cpu")
    per_call_us = (time.perf_counter() - start) / n * 1e6
    assert per_call_us < 50, f"Python resolve call took {per_call_us:.1f} us"
