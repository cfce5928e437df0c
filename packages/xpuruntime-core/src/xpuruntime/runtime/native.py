"""Loads the native module ``_core`` once, with an actionable error when it is missing."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# ABI_VERSION is served by __getattr__ below (it needs the native module).
__all__ = ["core", "cuda_library_dirs"]


@functools.cache
def core() -> ModuleType:
    """The native module, imported on first call."""
    try:
        from xpuruntime.runtime import _core
    except ImportError as exc:
        raise ImportError(
            "xpuruntime.runtime._core (the native core) is not built or does not load: "
            f"{exc}. Reinstall xpuruntime-core from source, for example "
            "`pip install --force-reinstall packages/xpuruntime-core` "
            "(XPURUNTIME_CUDA=OFF for a CPU-only build)."
        ) from exc
    module: ModuleType = _core
    if _core.CUDA_BUILT:
        _core.set_library_dirs([str(d) for d in cuda_library_dirs()])
    # Kernels written in Python (Triton) join the registry as the core loads, so every
    # resolution sees them; registering imports neither torch nor Triton.
    from xpuruntime.kernels import register_python_kernels

    register_python_kernels(module)
    return module


def cuda_library_dirs() -> list[Path]:
    """Directories of NVIDIA's pip wheels (nvidia-cublas, ...) on sys.path, for dlopen."""
    dirs: list[Path] = []
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            dirs.extend(sorted(p for p in nvidia.glob("*/lib") if p.is_dir()))
    return dirs


def __getattr__(name: str) -> Any:
    if name == "ABI_VERSION":
        return int(core().ABI_VERSION)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
