"""The environment layer: XPURUNTIME_POLICY_* and XPURUNTIME_POLICY_FILE in training, with
the precedence every part of xpuruntime uses (defaults < objects/file < environment <
keyword arguments) and the record saying which layer set what."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, PolicyError, UnknownFieldError
from xpuruntime.runtime.errors import UnsupportedOperationError


def test_environment_sets_a_kernel_and_the_record_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_KERNEL_ATTENTION", "math")
    record = xrt_torch.set_kernel_policy(exec_policy=ExecutionPolicy(precision="fp32"))
    assert xrt_torch.get_kernel_policy() == KernelPolicy(attention="math")
    assert not torch.backends.cuda.flash_sdp_enabled()
    assert record.policy_sources["kernel.ops.attention"] == (
        "environment (XPURUNTIME_POLICY_KERNEL_ATTENTION)"
    )


def test_environment_overrides_objects_and_keywords_override_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_KERNEL_LAYERNORM", "cpu")
    xrt_torch.set_kernel_policy(KernelPolicy(layernorm="torch"))
    assert xrt_torch.get_kernel_policy() == KernelPolicy(layernorm="cpu")
    record = xrt_torch.set_kernel_policy(layernorm="xrt")
    assert xrt_torch.get_kernel_policy() == KernelPolicy(layernorm="xrt")
    assert record.policy_sources == {"kernel.ops.layernorm": "argument"}


def test_environment_fallback_mode_applies_to_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_FALLBACK", "error")
    monkeypatch.setenv("XPURUNTIME_POLICY_DEVICE", "cuda")
    with pytest.raises(UnsupportedOperationError, match="pins layernorm='apex'"):
        xrt_torch.set_kernel_policy(layernorm="apex")
    assert xrt_torch.get_kernel_policy() is None


def test_environment_applies_only_the_execution_settings_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_PRECISION", "tf32")
    with xrt_torch.kernel_policy(attention="math") as record:
        assert {s.name for s in record.settings} == {"attention", "precision"}
        assert record.precision is not None
        assert record.precision.requested == "tf32"
        # Chosen only where a switch sets it: on a CPU-only machine the record says why not.
        assert record.precision.chosen == ("tf32" if torch.cuda.is_available() else None)
        assert xrt_torch.get_execution_policy() == ExecutionPolicy(
            precision="tf32", kernel_policy=KernelPolicy(attention="math")
        )
    assert record.policy_sources["execution.precision"] == (
        "environment (XPURUNTIME_POLICY_PRECISION)"
    )


def test_policy_file_from_the_environment_is_the_base(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = KernelPolicy(attention="math").save(tmp_path / "policy.yaml")
    monkeypatch.setenv("XPURUNTIME_POLICY_FILE", str(path))
    record = xrt_torch.set_kernel_policy(layernorm="torch")
    assert xrt_torch.get_kernel_policy() == KernelPolicy(attention="math", layernorm="torch")
    assert record.policy_sources["kernel.ops.attention"] == f"policy {path}"


def test_an_unknown_policy_variable_is_an_error_with_a_suggestion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_PRECISON", "fp16")
    with pytest.raises(UnknownFieldError, match="Did you mean 'XPURUNTIME_POLICY_PRECISION'"):
        xrt_torch.set_kernel_policy(attention="math")
    with pytest.raises(PolicyError), xrt_torch.kernel_policy(attention="math"):
        pass
    assert xrt_torch.get_kernel_policy() is None
