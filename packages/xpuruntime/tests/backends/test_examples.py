"""The seed quick-start scripts in examples/ run as written with the backend installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
BACKEND = os.environ.get("XPURUNTIME_BACKEND", "")

# backend -> [(script, arguments, text the output must contain)]
RUNS = {
    "cpu": [
        ("inference_quickstart.py", [], "onnxruntime"),
        ("policy_as_code.py", [], "content hash:"),
    ],
    "openvino": [("npu_quickstart.py", ["--backend", "openvino"], "openvino")],
    "qnn": [("npu_quickstart.py", ["--backend", "qnn"], "qnn")],
    "torch-cpu": [("training_quickstart.py", [], '"kind": "training"')],
}
CASES = RUNS.get(BACKEND, [])


@pytest.mark.skipif(not CASES, reason=f"no example runs for backend {BACKEND or '(unset)'}")
@pytest.mark.parametrize(("script", "arguments", "expected"), CASES)
def test_example_runs(script: str, arguments: list[str], expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *arguments],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert expected in result.stdout, result.stdout[-4000:]
