"""Importing the package and listing engines import no engine backend."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import xpuruntime.inference
import xpuruntime.inference.engines.onnxruntime
import xpuruntime.inference.engines.tensorrt
import xpuruntime.inference.cli
from xpuruntime.runtime.engines import discover_engines
assert {"onnxruntime", "tensorrt"} <= set(discover_engines())
heavy = sorted(m for m in ("onnxruntime", "tensorrt", "torch", "openvino") if m in sys.modules)
print(",".join(heavy))
"""


def test_import_is_light() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
