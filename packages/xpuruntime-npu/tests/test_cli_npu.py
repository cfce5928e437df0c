"""``xpuruntime demo --device npu`` with OpenVINO installed: OpenVINO is the engine (it is
made for NPUs), and on a machine without an NPU its own fallback says so; nobody is told to
install what is installed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("openvino")

from xpuruntime.inference.cli import main


def test_demo_on_npu_picks_openvino() -> None:
    result = CliRunner().invoke(main, ["demo", "--device", "npu", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)["record"]
    assert record["engine"]["chosen"] == "openvino"
    assert "pip install 'xpuruntime[openvino]'" not in result.output
    if record["fallbacks"]:  # no NPU here: OpenVINO's recorded fallback, not ONNX Runtime's
        assert (
            "NPU" in record["fallbacks"][0]["reason"] or "npu" in record["fallbacks"][0]["reason"]
        )
