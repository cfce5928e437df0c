"""Devices: the CUDA GPUs the driver reports, and the CPU (seed 003 §6.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from xpuruntime.runtime.native import core

__all__ = [
    "Device",
    "cuda_available",
    "get_all_devices",
    "get_current_device",
    "get_device_count",
    "set_current_device",
    "synchronize",
]


@dataclass(frozen=True)
class Device:
    """A snapshot of one device's properties (free_memory is as of the query)."""

    id: int
    name: str
    kind: Literal["cuda", "cpu"]
    total_memory: int
    free_memory: int
    compute_capability: tuple[int, int]
    sm_count: int
    supports_fp16: bool
    supports_bf16: bool
    supports_int8: bool

    @classmethod
    def _from_native(cls, info: Any) -> Device:
        return cls(
            id=info.id,
            name=info.name,
            kind=info.kind,
            total_memory=info.total_memory,
            free_memory=info.free_memory,
            compute_capability=(info.cc_major, info.cc_minor),
            sm_count=info.sm_count,
            supports_fp16=info.supports_fp16,
            supports_bf16=info.supports_bf16,
            supports_int8=info.supports_int8,
        )

    @property
    def total_memory_gb(self) -> float:
        return self.total_memory / 1024**3

    @property
    def spec(self) -> str:
        """The device string ops and policies use: ``"cuda:0"`` or ``"cpu"``."""
        return f"cuda:{self.id}" if self.kind == "cuda" else "cpu"

    def synchronize(self) -> None:
        """Wait for all work queued on this device (no-op for the CPU)."""
        if self.kind == "cuda":
            core().synchronize(self.id)

    def __repr__(self) -> str:
        return f"<Device {self.spec}: {self.name} ({self.total_memory_gb:.1f} GB)>"


def cuda_available() -> bool:
    """True when this is a CUDA build and the driver reports at least one GPU."""
    return bool(core().cuda_device_count() > 0)


def get_device_count() -> int:
    """Number of CUDA devices (0 on a machine without GPU or driver, or in a CPU build)."""
    return int(core().cuda_device_count())


def get_all_devices() -> list[Device]:
    """Every CUDA device, then the CPU."""
    return [Device._from_native(info) for info in core().all_devices()]


def get_device(device: int | str) -> Device:
    """One device by CUDA index or spec (``"cuda:1"``, ``"cpu"``); out of range says how many exist."""
    if device == "cpu":
        return Device._from_native(core().cpu_device())
    index = (0 if device == "cuda" else _cuda_index(device)) if isinstance(device, str) else device
    return Device._from_native(core().cuda_device(index))


def get_current_device() -> Device:
    """The current CUDA device; InvalidArgumentError when there is none."""
    return Device._from_native(core().cuda_device(core().current_device()))


def set_current_device(device: int | Device) -> None:
    """Make CUDA device ``device`` current for this thread."""
    core().set_current_device(device.id if isinstance(device, Device) else device)


def synchronize(device: int | None = None) -> None:
    """Wait for all work on ``device`` (default: the current device); no-op without CUDA."""
    core().synchronize(-1 if device is None else device)


def _cuda_index(spec: str) -> int:
    prefix, _, index = spec.partition(":")
    if prefix != "cuda" or not index.isdigit():
        from xpuruntime.runtime.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"invalid device {spec!r}; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0"
        )
    return int(index)
