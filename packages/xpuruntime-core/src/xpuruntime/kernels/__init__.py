"""xpuruntime's own kernels written in Python (Triton), registered in the native kernel
registry when the native core loads, so the dispatcher resolves, caches and logs them like its
C++ kernels and a kernel policy names them like any other.

Importing this package imports neither torch nor Triton: a kernel's support check says when
they are missing, and its launcher imports them on first use.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["register_python_kernels"]


def register_python_kernels(core: ModuleType) -> None:
    """Register every Python kernel with the native module ``core`` (idempotent)."""
    from xpuruntime.kernels import attention

    attention.register(core)
