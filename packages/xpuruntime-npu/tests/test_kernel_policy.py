"""The NPU engines apply a KernelPolicy through their kernel table: what they cannot honour
follows the fallback rule every engine follows (a pin under fallback='error' raises)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "openvino", reason="openvino is not installed: pip install 'xpuruntime-npu[openvino]'"
)

from xpuruntime.npu.engines.openvino import OpenVINOEngine
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning


def _session(model: Path, kernel_policy: KernelPolicy, fallback: str) -> ExecutionRecord:
    record = ExecutionRecord(kind="inference")
    OpenVINOEngine().create_session(
        model,
        device="cpu",
        exec_policy=ExecutionPolicy(fallback=fallback),  # type: ignore[arg-type]
        kernel_policy=kernel_policy,
        record=record,
    )
    return record


def test_openvino_honours_its_cpu_kernels(cnn: Path) -> None:
    record = _session(cnn, KernelPolicy(conv="onednn", matmul="cpu", layernorm="cpu"), "error")
    assert record.fallbacks == []
    settings = {s.name: s for s in record.settings if s.name.startswith("kernel_policy.")}
    assert settings["kernel_policy.conv"].honoured
    assert "no layernorm nodes" in settings["kernel_policy.layernorm"].note


def test_openvino_cannot_guarantee_another_kernel(cnn: Path) -> None:
    policy = KernelPolicy(conv="torch")
    with pytest.raises(UnsupportedOperationError, match="pins conv='torch'"):
        _session(cnn, policy, "error")
    with pytest.warns(FallbackWarning, match="kernel for conv"):
        record = _session(cnn, policy, "warn")
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen) == ("torch", "openvino's own choice")
    preferred = KernelPolicy().set("conv", "torch", "prefer")
    assert _session(cnn, preferred, "allow").fallbacks[0].mode == "allow"
