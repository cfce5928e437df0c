"""The one OpenVINO Core of the process, and the lookups on it that discovery and the engine share."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.engine_logs import route_openvino_log
from xpuruntime.runtime.errors import EngineNotInstalledError

if TYPE_CHECKING:
    import openvino

INSTALL_HINT = "pip install 'xpuruntime[openvino]'  (or: pip install 'xpuruntime-npu[openvino]')"


def import_openvino() -> Any:
    """The ``openvino`` module, or EngineNotInstalledError with the install command."""
    try:
        import openvino
    except ImportError as exc:
        raise EngineNotInstalledError(
            f"the OpenVINO engine needs the openvino package ({exc}). Install it with: {INSTALL_HINT}"
        ) from exc
    route_openvino_log(openvino)
    return openvino


@functools.lru_cache(maxsize=1)
def core() -> openvino.Core:
    """A process-wide ``openvino.Core`` (creating one loads the plugin registry: slow)."""
    return import_openvino().Core()


def device_property(device: str, name: str) -> Any:
    """``core().get_property(device, name)``, or None when the device does not expose it."""
    ov_core = core()
    try:
        if name not in ov_core.get_property(device, "SUPPORTED_PROPERTIES"):
            return None
        return ov_core.get_property(device, name)
    except RuntimeError:  # a plugin that cannot load (no driver) answers nothing
        return None


def capabilities(device: str) -> tuple[str, ...]:
    """OPTIMIZATION_CAPABILITIES of a device (FP32, FP16, BF16, INT8, ...); empty if unknown."""
    caps = device_property(device, "OPTIMIZATION_CAPABILITIES")
    return tuple(str(c) for c in caps) if caps else ()
