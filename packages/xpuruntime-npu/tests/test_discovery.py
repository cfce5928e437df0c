"""NPU discovery through the installed backends, and device='npu' resolution."""

from __future__ import annotations

import pytest

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.npu import discover_npus, npu_backend_status, resolve_npu
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.execution_policy import Fallback
from xpuruntime.runtime import Decisions
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning


def test_discovered_npus_describe_themselves():
    for device in discover_npus():
        assert device.kind == "npu"
        assert device.id.startswith("npu:")
        assert not device.emulated
        assert device.backend in ("openvino", "qnn")
        assert device.properties


def test_the_qnn_simulator_is_listed_only_on_request():
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn is not installed")
    assert all(not d.emulated for d in discover_npus(["qnn"]))
    (simulator,) = [d for d in discover_npus(["qnn"], include_emulated=True) if d.emulated]
    assert simulator.emulated
    assert simulator.backend == "qnn"
    assert simulator.id == "cpu"
    assert simulator.properties["qnn-sdk"].count(".") == 2
    assert "HTP simulator" in simulator.name


def test_backend_status_names_versions_and_devices():
    status = npu_backend_status()
    assert set(status) == {"openvino", "qnn"}
    for text in status.values():
        assert "NPUs: " in text or "Install:" in text


def _decisions(fallback: Fallback, record: ExecutionRecord) -> Decisions:
    return Decisions(ExecutionPolicy(fallback=fallback), record=record)


@pytest.mark.usefixtures("npu_absent")
class TestResolveNpu:
    def test_error_mode_raises_with_what_was_searched(self):
        with pytest.raises(FallbackError, match="no NPU found through openvino or qnn"):
            resolve_npu("npu")

    def test_warn_mode_returns_none_and_records(self):
        record = ExecutionRecord(kind="inference")
        with pytest.warns(FallbackWarning, match="no NPU found"):
            assert resolve_npu("npu:0", decisions=_decisions("warn", record)) is None
        assert record.device.chosen == "cpu"
        assert [(f.requested, f.chosen, f.mode) for f in record.fallbacks] == [
            ("npu:0", "cpu", "warn")
        ]

    def test_allow_mode_records_silently(self):
        record = ExecutionRecord(kind="inference")
        assert resolve_npu(decisions=_decisions("allow", record), backend="openvino") is None
        assert record.fallbacks[0].mode == "allow"

    @pytest.mark.parametrize("name", ["npu:x", "gpu", "nPU0"])
    def test_bad_names(self, name):
        with pytest.raises(DeviceNotFoundError, match="'npu'"):
            resolve_npu(name)
