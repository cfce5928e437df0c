"""xpuruntime.runtime: devices, memory, streams, dispatcher, profiler and tensors.

The native module ``_core`` is loaded on first use (PEP 562), so the pure-Python submodules
(``errors``, ``record``, ``engines``, ``abi``) import without it, and ``import
xpuruntime.runtime`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpuruntime.runtime import memory, profiler
    from xpuruntime.runtime.decisions import Decisions
    from xpuruntime.runtime.device import (
        Device,
        cuda_available,
        get_all_devices,
        get_current_device,
        get_device_count,
        set_current_device,
        synchronize,
    )
    from xpuruntime.runtime.dispatch import Decision, dispatcher, engine_registry
    from xpuruntime.runtime.errors import (
        CudaError,
        EngineNotInstalledError,
        FallbackError,
        InvalidArgumentError,
        OutOfMemoryError,
        RecordSchemaError,
        UnsupportedOperationError,
        XpuRuntimeError,
    )
    from xpuruntime.runtime.fingerprint import environment_fingerprint, fingerprint_hash
    from xpuruntime.runtime.native import ABI_VERSION
    from xpuruntime.runtime.streams import Event, Graph, Stream
    from xpuruntime.runtime.tensor import Tensor, empty, from_dlpack

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "ABI_VERSION": "native",
    "Device": "device",
    "cuda_available": "device",
    "get_device_count": "device",
    "get_all_devices": "device",
    "get_current_device": "device",
    "set_current_device": "device",
    "synchronize": "device",
    "Stream": "streams",
    "Event": "streams",
    "Graph": "streams",
    "Tensor": "tensor",
    "empty": "tensor",
    "from_dlpack": "tensor",
    "Decision": "dispatch",
    "Decisions": "decisions",
    "dispatcher": "dispatch",
    "engine_registry": "dispatch",
    "environment_fingerprint": "fingerprint",
    "fingerprint_hash": "fingerprint",
    "InvalidArgumentError": "errors",
    "CudaError": "errors",
    "EngineNotInstalledError": "errors",
    "FallbackError": "errors",
    "OutOfMemoryError": "errors",
    "RecordSchemaError": "errors",
    "UnsupportedOperationError": "errors",
    "XpuRuntimeError": "errors",
}
_SUBMODULES = frozenset({"memory", "profiler"})

__all__ = [
    "ABI_VERSION",
    "CudaError",
    "Decision",
    "Decisions",
    "Device",
    "EngineNotInstalledError",
    "Event",
    "FallbackError",
    "Graph",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "RecordSchemaError",
    "Stream",
    "Tensor",
    "UnsupportedOperationError",
    "XpuRuntimeError",
    "cuda_available",
    "dispatcher",
    "empty",
    "engine_registry",
    "environment_fingerprint",
    "fingerprint_hash",
    "from_dlpack",
    "get_all_devices",
    "get_current_device",
    "get_device_count",
    "memory",
    "profiler",
    "set_current_device",
    "synchronize",
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
