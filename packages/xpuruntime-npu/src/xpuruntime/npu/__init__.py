"""xpuruntime-npu: OpenVINO and QNN engine plugins, NPU discovery, int8 quantization helpers.

The engines are found through the ``xpuruntime.engines`` entry points (``openvino``,
``qnn``) and import their backends only when used, so importing this package is cheap.
"""

from __future__ import annotations

from xpuruntime.npu.discovery import NpuDevice, discover_npus, npu_backend_status, resolve_npu
from xpuruntime.npu.errors import QuantizedModelRequiredError, StaticShapeRequiredError

__all__ = [
    "NpuDevice",
    "QuantizedModelRequiredError",
    "StaticShapeRequiredError",
    "discover_npus",
    "npu_backend_status",
    "resolve_npu",
]
