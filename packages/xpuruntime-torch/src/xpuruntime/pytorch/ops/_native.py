"""xpuruntime-torch's native ops (:mod:`xpuruntime.pytorch.ops._C`, built from ``csrc/``):
loaded once, checked against the PyTorch and the core they run with, and given the core's C
kernel table.

The extension is compiled against one PyTorch release (its C++ API, which autograd kernels
need, has no stable ABI), so a wheel serves the PyTorch it was built with; anything else is
an ImportError that says what to install.
"""

from __future__ import annotations

from types import ModuleType

import torch

from xpuruntime.runtime.native import core

__all__ = ["native"]

_REINSTALL = (
    "reinstall xpuruntime-torch built against this PyTorch: `pip install --force-reinstall "
    "--no-deps --no-build-isolation xpuruntime-torch` in an environment holding torch "
    "{torch} (a C++ compiler is needed), or install the xpuruntime-torch wheel made for "
    "torch {torch}"
)


def _release(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def _load() -> ModuleType:
    hint = _REINSTALL.format(torch=torch.__version__)
    try:
        from xpuruntime.pytorch.ops import _C
    except ImportError as error:
        raise ImportError(
            f"xpuruntime-torch's native ops (xpuruntime.pytorch.ops._C) cannot be loaded with "
            f"PyTorch {torch.__version__}: {error}. They are built per PyTorch release: {hint}"
        ) from error
    if _release(_C.TORCH_VERSION) != _release(torch.__version__):
        raise ImportError(
            f"xpuruntime-torch's native ops were built for PyTorch {_C.TORCH_VERSION}, but this "
            f"is PyTorch {torch.__version__}: {hint}"
        )
    table = getattr(core(), "KERNEL_TABLE", None)
    if table is None:
        raise ImportError(
            "xpuruntime-core has no kernel table (KERNEL_TABLE), which xpuruntime-torch's "
            "native ops call: install the xpuruntime-core release that matches xpuruntime-torch"
        )
    _C.load_kernel_table(table)
    return _C


#: The loaded extension module.
native = _load()
