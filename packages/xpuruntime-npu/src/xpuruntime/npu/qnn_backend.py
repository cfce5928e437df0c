"""ONNX Runtime's QNN plugin execution provider (``onnxruntime-qnn`` 2.x): registration and devices.

onnxruntime-qnn 2.x is a plugin EP: its own import package ``onnxruntime_qnn`` ships
``libonnxruntime_providers_qnn.so`` and the QNN backends (HTP, GPU), and plugs into the
standard ``onnxruntime`` package at run time through ``register_execution_provider_library``.
The library is registered once per process; its ``OrtEpDevice`` entries are the devices
sessions are bound to with ``SessionOptions.add_provider_for_devices``.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from typing import Any, Literal

from xpuruntime.runtime.errors import EngineNotInstalledError

EP_NAME = "QNNExecutionProvider"
INSTALL_HINT = "pip install 'xpuruntime[qnn]'  (or: pip install 'xpuruntime-npu[qnn]')"

DeviceKind = Literal["npu", "gpu", "cpu"]
Backend = Literal["htp", "gpu", "cpu"]


def import_qnn() -> tuple[Any, Any]:
    """(onnxruntime, onnxruntime_qnn), or EngineNotInstalledError with the install command."""
    try:
        import onnxruntime
        import onnxruntime_qnn
    except ImportError as exc:
        raise EngineNotInstalledError(
            f"the QNN engine needs onnxruntime and the onnxruntime-qnn plugin ({exc}). "
            f"Install them with: {INSTALL_HINT}"
        ) from exc
    return onnxruntime, onnxruntime_qnn


@functools.lru_cache(maxsize=1)
def register() -> None:
    """Register the QNN EP library with ONNX Runtime once (a second registration fails)."""
    ort, qnn = import_qnn()
    if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
        ort.register_execution_provider_library(EP_NAME, qnn.get_library_path())


@dataclass(frozen=True)
class QnnDevice:
    """One QNN EP device: its xpuruntime kind and index, and what ONNX Runtime says of it."""

    kind: DeviceKind
    index: int
    vendor: str
    vendor_id: int
    device_id: int
    metadata: dict[str, str]
    ep_device: Any

    @property
    def name(self) -> str:
        """The xpuruntime device name (``npu:0``, ``gpu:0``, ``cpu``)."""
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    @property
    def emulated_htp(self) -> bool:
        """The HTP backend on a CPU device runs QNN's x86_64 HTP simulator, not an NPU."""
        return self.kind == "cpu"


def devices() -> list[QnnDevice]:
    """The QNN EP's devices, numbered per kind in ONNX Runtime's order."""
    ort, _ = import_qnn()
    register()
    kinds: dict[Any, DeviceKind] = {
        ort.OrtHardwareDeviceType.NPU: "npu",
        ort.OrtHardwareDeviceType.GPU: "gpu",
        ort.OrtHardwareDeviceType.CPU: "cpu",
    }
    found: list[QnnDevice] = []
    for ep_device in ort.get_ep_devices():
        if ep_device.ep_name != EP_NAME:
            continue
        hw = ep_device.device
        kind = kinds[hw.type]
        index = sum(1 for d in found if d.kind == kind)
        found.append(
            QnnDevice(
                kind,
                index,
                str(hw.vendor),
                int(hw.vendor_id),
                int(hw.device_id),
                dict(hw.metadata),
                ep_device,
            )
        )
    return found


def backend_library(backend: Backend) -> str | None:
    """Path of the QNN backend library shipped in the wheel, or None when it is not shipped."""
    _, qnn = import_qnn()
    getter = {"htp": qnn.get_qnn_htp_path, "gpu": qnn.get_qnn_gpu_path, "cpu": qnn.get_qnn_cpu_path}
    path = str(getter[backend]())
    return path if os.path.exists(path) else None


def versions() -> dict[str, str]:
    """onnxruntime, onnxruntime-qnn and QAIRT (QNN SDK) versions, plus the host machine."""
    ort, qnn = import_qnn()
    return {
        "onnxruntime": str(ort.__version__),
        "onnxruntime-qnn": str(qnn.__version__),
        "qnn-sdk": str(getattr(qnn.build_and_package_info, "qnn_version", "unknown")),
        "machine": platform.machine(),
    }
