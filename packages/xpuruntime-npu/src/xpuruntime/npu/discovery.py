"""NPUs found through OpenVINO (Intel NPU) and the QNN execution provider (Qualcomm HTP).

Each backend numbers its own NPUs: ``NpuDevice.id`` (``npu:0`` ...) is the device name that
engine accepts, so ``(backend, id)`` identifies a device. A backend that is not installed
contributes nothing here; :func:`npu_backend_status` says why, with the install command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from xpuruntime.npu.errors import unknown_device
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.device import split_device
from xpuruntime.runtime.record import Choice, ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.runtime.engines import Engine

NpuBackend = Literal["openvino", "qnn"]
BACKENDS: tuple[NpuBackend, ...] = ("openvino", "qnn")

# OpenVINO NPU properties worth showing; each is read only when the device lists it.
_OPENVINO_PROPERTIES = (
    "FULL_DEVICE_NAME",
    "DEVICE_ARCHITECTURE",
    "DEVICE_ID",
    "DEVICE_UUID",
    "DEVICE_GOPS",
    "OPTIMIZATION_CAPABILITIES",
    "NPU_DEVICE_TOTAL_MEM_SIZE",
    "NPU_DRIVER_VERSION",
    "NPU_COMPILER_VERSION",
)


@dataclass(frozen=True)
class NpuDevice:
    """One NPU: its name for ``device=`` under ``backend``, and what the backend reports."""

    id: str
    name: str
    backend: NpuBackend
    backend_device: str
    vendor: str
    properties: Mapping[str, str] = field(default_factory=dict)
    emulated: bool = False
    kind: str = "npu"


def _openvino_npus() -> list[NpuDevice]:
    from xpuruntime.npu import openvino_backend

    found = []
    for index, name in enumerate(
        d for d in openvino_backend.core().available_devices if d.startswith("NPU")
    ):
        props = {}
        for key in _OPENVINO_PROPERTIES:
            value = openvino_backend.device_property(name, key)
            if value is not None:
                props[key] = str(value)
        found.append(
            NpuDevice(
                f"npu:{index}",
                props.get("FULL_DEVICE_NAME", name),
                "openvino",
                name,
                "Intel",
                props,
            )
        )
    return found


def _qnn_npus(include_emulated: bool) -> list[NpuDevice]:
    from xpuruntime.npu import qnn_backend

    versions = qnn_backend.versions()
    found = []
    for device in qnn_backend.devices():
        if device.kind == "npu" or (include_emulated and device.kind == "cpu"):
            props = {
                **device.metadata,
                **versions,
                "vendor_id": f"{device.vendor_id:#06x}",
                "device_id": f"{device.device_id:#06x}",
            }
            emulated = device.kind == "cpu"
            label = "QNN HTP simulator" if emulated else "Qualcomm HTP (QNN)"
            found.append(
                NpuDevice(
                    device.name,
                    f"{label} on {device.vendor}",
                    "qnn",
                    device.name,
                    device.vendor,
                    props,
                    emulated,
                )
            )
    return found


def discover_npus(
    backends: Sequence[NpuBackend] = BACKENDS, *, include_emulated: bool = False
) -> list[NpuDevice]:
    """The NPUs the installed backends see. ``include_emulated`` adds QNN's x86_64 HTP simulator."""
    found: list[NpuDevice] = []
    for backend in backends:
        try:
            found += _openvino_npus() if backend == "openvino" else _qnn_npus(include_emulated)
        except ImportError:
            continue  # not installed: npu_backend_status() says so with the install command
    return found


def npu_backend_status() -> dict[str, str]:
    """Per backend: its version and NPU count, or why it is unusable and how to install it."""
    status: dict[str, str] = {}
    for backend in BACKENDS:
        engine = _engine(backend)
        found = engine.availability()
        if not found.available:
            status[backend] = f"unavailable: {found.reason} Install: {found.install_hint}"
            continue
        npus = [d for d in found.devices if d.startswith("npu")]
        versions = ", ".join(f"{k} {v}" for k, v in found.versions.items())
        status[backend] = f"{versions}; NPUs: {npus or 'none'}; devices: {list(found.devices)}"
    return status


def _engine(backend: NpuBackend) -> type[Engine]:
    if backend == "openvino":
        from xpuruntime.npu.engines.openvino import OpenVINOEngine

        return OpenVINOEngine
    from xpuruntime.npu.engines.qnn import QNNEngine

    return QNNEngine


def resolve_npu(
    device: str = "npu",
    *,
    backend: NpuBackend | None = None,
    decisions: Decisions | None = None,
) -> NpuDevice | None:
    """The NPU ``device`` (``"npu"`` or ``"npu:N"``) names, or None to run on the CPU instead.

    No NPU here is a fallback to the CPU, taken by ``decisions`` under its policy's fallback
    rule (``"error"`` raises FallbackError, ``"warn"`` warns) and written into its record;
    without ``decisions`` the fallback raises. An index past the NPUs found is a
    DeviceNotFoundError listing them.
    """
    text = device.strip().lower()
    spec = split_device(text)
    npus = discover_npus([backend] if backend else BACKENDS)
    if spec is None or spec.kind != "npu":
        raise unknown_device(device, engine="NPU discovery", known=["npu", *(d.id for d in npus)])
    if decisions is None:
        decisions = Decisions(
            ExecutionPolicy(fallback="error"), record=ExecutionRecord(kind="inference")
        )
    record = decisions.record
    if not npus:
        decisions.fallback(
            what="device",
            requested=text,
            chosen="cpu",
            reason=f"no NPU found through {backend or ' or '.join(BACKENDS)}: "
            + "; ".join(
                f"{b}: {s}" for b, s in npu_backend_status().items() if backend in (None, b)
            ),
        )
        record.device = Choice(text, "cpu", "no NPU found")
        return None
    matches = [d for d in npus if d.id == f"npu:{spec.ordinal}"]
    if not matches:
        raise unknown_device(
            device, engine="NPU discovery", known=[f"{d.id} ({d.backend})" for d in npus]
        )
    record.device = Choice(text, matches[0].id, f"{matches[0].name} through {matches[0].backend}")
    return matches[0]
