"""Turning an xpuruntime device name into an OpenVINO compile target, fallbacks included.

Accepted names: ``"npu"``, ``"npu:N"``, ``"cpu"``, ``"gpu"``, ``"gpu:N"``, ``"auto"``, and
OpenVINO's own names (``"NPU"``, ``"GPU.1"``, ``"AUTO:NPU,CPU"``). The *required* device is
the one asked for (for an AUTO priority list, its first entry; plain ``"auto"`` requires
none). A required device that OpenVINO does not find here is a fallback, applied through
``Decisions.fallback`` under the policy's mode, never silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.npu.errors import unknown_device
from xpuruntime.runtime.device import split_device, split_kind_index

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpuruntime.runtime.decisions import Decisions

DEVICE_KINDS = ("CPU", "GPU", "NPU")
_OV_NAME = re.compile(r"^(CPU|GPU|NPU)(?:\.(\d+))?$")


@dataclass(frozen=True)
class OpenVINOTarget:
    """What to compile for, and what the user required (None: any device will do)."""

    requested: str
    compile_device: str
    required: str | None
    candidates: tuple[str, ...]
    asked_kinds: tuple[str, ...]  # kinds the user named, present here or not

    @property
    def kinds(self) -> tuple[str, ...]:
        """Device kinds (CPU/GPU/NPU) this target may execute on."""
        return _kinds(self.candidates)


def _kinds(devices: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d.split(".")[0] for d in devices))


def _match(kind: str, index: int | None, available: Sequence[str]) -> str | None:
    """The available OpenVINO device for kind/index (``NPU`` and ``NPU.0`` both mean index 0)."""
    wanted = [f"{kind}.{index}"] if index is not None else [kind, f"{kind}.0"]
    if index == 0:
        wanted.append(kind)
    for name in wanted:
        if name in available:
            return name
    if index is None:
        return next((d for d in available if d.split(".")[0] == kind), None)
    return None


def _single(name: str) -> tuple[str, int | None] | None:
    """(kind, index) of one device name in either spelling, else None."""
    xrt = split_kind_index(name)
    if xrt is not None and xrt[0].upper() in DEVICE_KINDS:
        return xrt[0].upper(), xrt[1]
    ov = _OV_NAME.match(name.upper())
    if ov:
        return ov.group(1), int(ov.group(2)) if ov.group(2) else None
    return None


def _unknown(name: str, available: Sequence[str]) -> DeviceNotFoundError:
    known = [*available, *(k.lower() for k in DEVICE_KINDS), "auto", "AUTO:<device>,<device>"]
    return unknown_device(name, engine="OpenVINO", known=known)


def xrt_name(device: str) -> str:
    """xpuruntime's name of an OpenVINO device: ``CPU`` -> ``cpu``, ``NPU`` -> ``npu:0``,
    ``GPU.1`` -> ``gpu:1`` (what ``engine="auto"`` matches sessions' devices against)."""
    kind, _, index = device.partition(".")
    if kind == "CPU":
        return "cpu"
    return f"{kind.lower()}:{index or 0}"


def _label(kind: str, index: int | None) -> str:
    return kind if index is None else f"{kind}.{index}"


def _missing(decisions: Decisions, required: str, chosen: str, available: Sequence[str]) -> None:
    """A required device absent here: raise, warn or record per the policy's fallback mode."""
    decisions.fallback(
        what="device",
        requested=required,
        chosen=chosen,
        reason=f"OpenVINO has no {required} device here; its devices: {list(available)}",
    )


def resolve_target(
    device: str,
    available: Sequence[str],
    *,
    decisions: Decisions,
) -> OpenVINOTarget:
    """The compile target for ``device``; a missing required device goes through fallback."""
    text = device.strip()
    if text.lower() == "auto":
        return OpenVINOTarget(text, "AUTO", None, tuple(available), _kinds(available))
    if text.upper().startswith("AUTO:"):
        parsed = [(part, _single(part)) for part in text[5:].split(",") if part.strip()]
        if not parsed:
            raise _unknown(text, available)
        kinds: list[tuple[str, int | None]] = []
        for part, kind_index in parsed:
            if kind_index is None:
                raise _unknown(part.strip(), available)
            kinds.append(kind_index)
        found = [m for kind, index in kinds if (m := _match(kind, index, available)) is not None]
        required = _label(*kinds[0])
        if _match(*kinds[0], available) is None:
            found = found or ["CPU"]
            _missing(decisions, required, ",".join(found), available)
        return OpenVINOTarget(
            text, "AUTO:" + ",".join(found), required, tuple(found), tuple(k for k, _ in kinds)
        )
    cuda = split_device(text)
    if cuda is not None and cuda.kind == "cuda":  # engine="auto" may hand us the session's GPU
        _missing(decisions, text.lower(), "CPU", available)
        return OpenVINOTarget(text, "CPU", None, ("CPU",), ("CPU",))
    kind_index = _single(text)
    if kind_index is None:
        raise _unknown(text, available)
    kind, index = kind_index
    match = _match(kind, index, available)
    required = _label(kind, index)
    if match is None:
        match = "CPU"
        _missing(decisions, required, match, available)
    return OpenVINOTarget(text, match, required, (match,), (kind,))
