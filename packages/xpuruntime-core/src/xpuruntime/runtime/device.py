"""Devices: the CUDA GPUs the driver reports, and the CPU (seed 003 §6.2); and the one parser
of device strings ("cpu", "cuda", "cuda:1", "npu", "npu:0") every package reads them with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from xpuruntime.runtime.native import core

__all__ = [
    "Device",
    "DeviceKind",
    "DeviceSpec",
    "cuda_available",
    "get_all_devices",
    "get_current_device",
    "get_device_count",
    "set_current_device",
    "split_device",
    "split_kind_index",
    "synchronize",
]

DeviceKind = Literal["cpu", "cuda", "npu"]
_KINDS: tuple[DeviceKind, ...] = ("cpu", "cuda", "npu")
_KIND_INDEX = re.compile(r"^([a-z]+)(?::(\d+))?$")


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device string: kind and index (``None`` for "any device of this kind")."""

    kind: DeviceKind
    index: int | None = None

    @property
    def ordinal(self) -> int:
        """The device index to use (the first device when none was named)."""
        return 0 if self.index is None else self.index

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


def split_kind_index(text: str) -> tuple[str, int | None] | None:
    """``" GPU:1 "`` -> ``("gpu", 1)``, ``"npu"`` -> ``("npu", None)``: the kind[:N] form of
    every device string, xpuruntime's kinds and engines' own (OpenVINO's and QNN's "gpu");
    None when ``text`` has another form."""
    match = _KIND_INDEX.match(text.strip().lower())
    if match is None:
        return None
    index = match.group(2)
    return match.group(1), None if index is None else int(index)


def split_device(text: str) -> DeviceSpec | None:
    """``"cuda:1"`` -> DeviceSpec("cuda", 1), ``" NPU "`` -> DeviceSpec("npu"); None when
    ``text`` is not one of xpuruntime's kinds with an optional index (each caller raises its
    own error, naming what it accepts)."""
    parts = split_kind_index(text)
    if parts is None:
        return None
    kind, index = parts
    for known in _KINDS:  # narrows the kind to DeviceKind
        if kind == known:
            return DeviceSpec(known, index)
    return None


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
    index = _cuda_index(device) if isinstance(device, str) else device
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
    parsed = split_device(spec)
    if parsed is None or parsed.kind != "cuda":
        from xpuruntime.runtime.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"invalid device {spec!r}; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0"
        )
    return parsed.ordinal
