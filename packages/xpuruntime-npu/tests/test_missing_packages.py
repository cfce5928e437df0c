"""Without openvino / onnxruntime-qnn: availability says why, and the engines raise with the
install command. The backend import is blocked with ``sys.modules[name] = None``, which makes
``import name`` raise ImportError exactly as an absent package does."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from xpuruntime.npu.engines.openvino import OpenVINOEngine
from xpuruntime.npu.engines.qnn import QNNEngine
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.errors import EngineNotInstalledError
from xpuruntime.runtime.record import ExecutionRecord


@pytest.mark.parametrize(
    ("engine", "blocked", "extra"),
    [
        (OpenVINOEngine, "openvino", "xpuruntime[openvino]"),
        (QNNEngine, "onnxruntime_qnn", "xpuruntime[qnn]"),
    ],
)
def test_missing_backend(monkeypatch, tmp_path, engine, blocked, extra):
    monkeypatch.setitem(sys.modules, blocked, None)
    found = engine.availability()
    assert not found.available
    assert extra in found.install_hint
    with pytest.raises(EngineNotInstalledError, match=re.escape(f"pip install '{extra}'")):
        engine().create_session(
            Path(tmp_path / "m.onnx"),
            device="cpu",
            exec_policy=ExecutionPolicy(),
            kernel_policy=None,
            record=ExecutionRecord(kind="inference"),
        )


def test_missing_nncf_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "nncf", None)
    quantize = importlib.import_module("xpuruntime.npu.quantize")
    with pytest.raises(EngineNotInstalledError, match=r"xpuruntime-npu\[nncf\]"):
        quantize.quantize_for_openvino(tmp_path / "m.onnx", [{}], tmp_path / "q.xml")


def test_importing_the_package_imports_no_backend():
    code = (
        "import sys, xpuruntime.npu, xpuruntime.npu.engines.openvino, xpuruntime.npu.engines.qnn;"
        "heavy = [m for m in ('openvino', 'onnxruntime', 'onnxruntime_qnn', 'nncf', 'torch') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)
