"""Errors specific to the PyTorch integration (all catchable as ``XpuRuntimeError``)."""

from __future__ import annotations

from xpuruntime.policies.errors import XpuRuntimeError

__all__ = ["AllocatorError", "CollectivePolicyError", "GraphInputError"]


class AllocatorError(XpuRuntimeError, RuntimeError):
    """The allocator cannot be swapped now (PyTorch already initialised CUDA, no GPU, ...)."""


class GraphInputError(XpuRuntimeError, ValueError):
    """A graphed step was called with inputs that do not fit its static buffers."""


class TorchVersionError(XpuRuntimeError, ImportError):
    """The installed PyTorch lacks an API xpuruntime.pytorch relies on (it moved or is gone)."""


class CollectivePolicyError(XpuRuntimeError, RuntimeError):
    """A collective policy cannot take effect now (NCCL already runs with other settings)."""
