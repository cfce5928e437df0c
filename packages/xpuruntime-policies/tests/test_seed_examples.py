"""The policy examples of the seed documents (002 §4.1, 003 §6.3, 004 §7), as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuruntime.policies import (
    AutoSelectStrategy,
    BestPerformance,
    ExecutionPolicy,
    FirstSupported,
    KernelPolicy,
)


def test_policy_as_code_save_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # seed 002 §4.1, verbatim apart from working in a temporary directory
    monkeypatch.chdir(tmp_path)
    policy = KernelPolicy(
        matmul="cublasLt",
        attention="flash_v2",
    )

    policy.save("policy.json")
    policy = KernelPolicy.load("policy.json")

    assert policy.preferences == {"matmul": "cublasLt", "attention": "flash_v2"}
    assert policy.mode("matmul") == "pin"


def test_kernel_policy_wrapper_api() -> None:
    # seed 003 §6.3: kwargs constructor, chainable set/remove, get, preferences, repr
    policy = KernelPolicy(matmul="cublasLt", attention="flash_v2")
    assert policy.set("layernorm", "xrt").remove("attention") is policy
    assert policy.get("matmul") == "cublasLt"
    assert policy.get("attention") is None
    assert policy.preferences == {"matmul": "cublasLt", "layernorm": "xrt"}
    assert repr(policy) == "KernelPolicy(matmul='cublasLt', layernorm='xrt')"


def test_auto_select_strategy_names_match_the_binding() -> None:
    # seed 003 §3.3 binds AutoSelectStrategy.FirstSupported / .BestPerformance
    assert AutoSelectStrategy.FirstSupported is FirstSupported
    assert AutoSelectStrategy.BestPerformance is BestPerformance
    assert KernelPolicy().strategy is FirstSupported
    assert KernelPolicy(strategy=BestPerformance).strategy.value == "best_performance"


def test_quick_start_kernel_policy() -> None:
    # seed 004 §7 (Inference): xrt.KernelPolicy(matmul="cublasLt", attention="flash_v2")
    policy = KernelPolicy(
        matmul="cublasLt",
        attention="flash_v2",
    )
    assert policy.entries["attention"].kernel == "flash_v2"


def test_quick_start_npu_execution_policy() -> None:
    # seed 004 §7 (NPU Inference): the engine is chosen by the session, not the policy
    policy = ExecutionPolicy(precision="int8", static_shape=True)
    assert (policy.precision, policy.static_shape) == ("int8", True)
    assert policy.fallback == "warn"


def test_policy_auto() -> None:
    # seed 002 §4.3: "auto selection when the user wants it (policy="auto")"
    policy = KernelPolicy.coerce("auto")
    assert policy == KernelPolicy()
    assert policy.mode("matmul") is None  # unmentioned ops are automatic
    assert KernelPolicy(matmul="auto").mode("matmul") == "auto"
