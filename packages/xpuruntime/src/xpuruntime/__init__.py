"""xpuruntime: explicit, reproducible, explainable GPU/NPU execution.

The seed quick-start API lives here (``import xpuruntime as xrt``), but every name is
resolved lazily (PEP 562) from the member distribution that owns it, so ``import
xpuruntime`` imports none of torch, onnxruntime, openvino or tensorrt, and a name whose
distribution is missing fails with the install command instead of a bare AttributeError.

``xpuruntime`` is a namespace shared by the member distributions (xpuruntime-policies,
-core, -inference, -npu, -torch). Only this meta-package ships ``__init__.py``; extending
``__path__`` keeps the members' subpackages importable when each lives on its own
``sys.path`` entry (the editable uv workspace) as well as in one site-packages.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pkgutil import extend_path
from types import ModuleType
from typing import TYPE_CHECKING, Any

__path__ = extend_path(__path__, __name__)

try:
    __version__ = version("xpuruntime")
except PackageNotFoundError:  # running from a source tree without the meta-package installed
    __version__ = "0+unknown"

TORCH_INSTALL_MESSAGE = (
    "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"
)

# Subpackage -> (distribution, install command) for subpackages that may be absent.
_OPTIONAL_SUBPACKAGES: dict[str, tuple[str, str]] = {
    "pytorch": ("xpuruntime-torch", "pip install xpuruntime[torch]"),
    "inference": ("xpuruntime-inference", "pip install xpuruntime"),
    "npu": ("xpuruntime-npu", "pip install xpuruntime[openvino] (or xpuruntime[qnn])"),
    "runtime": ("xpuruntime-core", "pip install xpuruntime"),
    "policies": ("xpuruntime-policies", "pip install xpuruntime-policies"),
}

# Public name -> module that defines it. Resolved on first attribute access.
_LAZY_ATTRIBUTES: dict[str, str] = {
    # policies
    "KernelPolicy": "xpuruntime.policies",
    "ExecutionPolicy": "xpuruntime.policies",
    "MemoryPolicy": "xpuruntime.policies",
    "OpPolicy": "xpuruntime.policies",
    "FirstSupported": "xpuruntime.policies",
    "BestPerformance": "xpuruntime.policies",
    "load_policy": "xpuruntime.policies",
    "PolicyError": "xpuruntime.policies.errors",
    "XpuRuntimeError": "xpuruntime.policies.errors",
    # runtime errors
    "CudaError": "xpuruntime.runtime.errors",
    "OutOfMemoryError": "xpuruntime.runtime.errors",
    "UnsupportedOperationError": "xpuruntime.runtime.errors",
    "FallbackError": "xpuruntime.runtime.errors",
    "EngineNotInstalledError": "xpuruntime.runtime.errors",
    # runtime
    "Device": "xpuruntime.runtime",
    "get_device_count": "xpuruntime.runtime",
    "get_current_device": "xpuruntime.runtime",
    "set_current_device": "xpuruntime.runtime",
    "synchronize": "xpuruntime.runtime",
    "environment_fingerprint": "xpuruntime.runtime",
    "ExecutionRecord": "xpuruntime.runtime.record",
    # inference
    "InferenceSession": "xpuruntime.inference",
}

__all__ = sorted([*_LAZY_ATTRIBUTES, "get_all_devices", "__version__"])


def _missing(subpackage: str, cause: BaseException | None = None) -> ImportError:
    if subpackage == "pytorch":
        return ImportError(TORCH_INSTALL_MESSAGE)
    dist, command = _OPTIONAL_SUBPACKAGES[subpackage]
    return ImportError(
        f"xpuruntime.{subpackage} is provided by the {dist} distribution, which is not "
        f"installed{f' ({cause})' if cause else ''}. Install with: {command}"
    )


class _MissingSubpackageFinder(importlib.abc.MetaPathFinder):
    """Last finder on ``sys.meta_path``: turns a missing member into an install hint.

    It is consulted only after every real finder failed, so it never shadows an installed
    member; ``import xpuruntime.pytorch`` without xpuruntime-torch then says what to install.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, sub = fullname.partition(".")
        if prefix == __name__ and sub in _OPTIONAL_SUBPACKAGES:
            raise _missing(sub)
        return None


if not any(isinstance(f, _MissingSubpackageFinder) for f in sys.meta_path):
    sys.meta_path.append(_MissingSubpackageFinder())


def get_all_devices() -> list[Any]:
    """Every device xpuruntime can target: CPU and CUDA devices from the core, plus NPUs
    found through OpenVINO and QNN when xpuruntime-npu and a backend are installed."""
    from xpuruntime import runtime

    devices: list[Any] = list(runtime.get_all_devices())
    try:
        npu = importlib.import_module("xpuruntime.npu")
    except ImportError:
        return devices
    devices.extend(npu.discover_npus())
    return devices


def __getattr__(name: str) -> Any:
    if name == "pytorch":
        try:
            return importlib.import_module("xpuruntime.pytorch")
        except ImportError as exc:
            raise ImportError(TORCH_INSTALL_MESSAGE) from exc
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        if name in _OPTIONAL_SUBPACKAGES:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # static names for type checkers and IDEs; never executed
    from xpuruntime.inference import (
        InferenceSession as InferenceSession,
    )
    from xpuruntime.policies import (
        BestPerformance as BestPerformance,
    )
    from xpuruntime.policies import (
        ExecutionPolicy as ExecutionPolicy,
    )
    from xpuruntime.policies import (
        FirstSupported as FirstSupported,
    )
    from xpuruntime.policies import (
        KernelPolicy as KernelPolicy,
    )
    from xpuruntime.policies import (
        MemoryPolicy as MemoryPolicy,
    )
    from xpuruntime.policies import (
        OpPolicy as OpPolicy,
    )
    from xpuruntime.policies import (
        load_policy as load_policy,
    )
    from xpuruntime.policies.errors import (
        PolicyError as PolicyError,
    )
    from xpuruntime.policies.errors import (
        XpuRuntimeError as XpuRuntimeError,
    )
    from xpuruntime.runtime import (
        Device as Device,
    )
    from xpuruntime.runtime import (
        environment_fingerprint as environment_fingerprint,
    )
    from xpuruntime.runtime import (
        get_current_device as get_current_device,
    )
    from xpuruntime.runtime import (
        get_device_count as get_device_count,
    )
    from xpuruntime.runtime import (
        set_current_device as set_current_device,
    )
    from xpuruntime.runtime import (
        synchronize as synchronize,
    )
    from xpuruntime.runtime.errors import (
        CudaError as CudaError,
    )
    from xpuruntime.runtime.errors import (
        EngineNotInstalledError as EngineNotInstalledError,
    )
    from xpuruntime.runtime.errors import (
        FallbackError as FallbackError,
    )
    from xpuruntime.runtime.errors import (
        OutOfMemoryError as OutOfMemoryError,
    )
    from xpuruntime.runtime.errors import (
        UnsupportedOperationError as UnsupportedOperationError,
    )
    from xpuruntime.runtime.record import (
        ExecutionRecord as ExecutionRecord,
    )
