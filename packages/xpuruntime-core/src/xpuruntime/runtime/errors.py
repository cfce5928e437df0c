"""Typed runtime errors. The native module maps its C++ exceptions onto these classes."""

from __future__ import annotations

from xpuruntime.policies.errors import PolicyError, XpuRuntimeError

__all__ = [
    "CudaError",
    "EngineNotInstalledError",
    "FallbackError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "PolicyError",
    "RecordSchemaError",
    "UnsupportedOperationError",
    "XpuRuntimeError",
]


class CudaError(XpuRuntimeError):
    """A CUDA runtime/driver/library call failed; the message names the call and the code."""


class OutOfMemoryError(CudaError, MemoryError):
    """A device allocation failed; the message gives requested and free bytes."""


class InvalidArgumentError(XpuRuntimeError, ValueError):
    """An argument is out of range or malformed (device index, dtype, device string); the
    message names the valid choices. Also a ValueError, so callers catching that keep working."""


class UnsupportedOperationError(XpuRuntimeError):
    """No kernel/engine can run what was asked (for example a pinned kernel that cannot run)."""


class FallbackError(XpuRuntimeError):
    """The policy said `fallback="error"` and something would have run elsewhere than asked."""


class EngineNotInstalledError(XpuRuntimeError, ImportError):
    """An engine the user named is not installed; the message carries the install command."""


class RecordSchemaError(XpuRuntimeError, ValueError):
    """An execution record (or lockfile) does not match a schema this release can read: a
    newer ``schema_version``, an unknown field, or not a record at all."""
