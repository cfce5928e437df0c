"""Typed errors of the inference package.

Each one says what was wrong (expected vs got) and what to do. They all derive from
:class:`~xpuruntime.policies.errors.XpuRuntimeError`, and also from the builtin a caller
would naturally catch (``FileNotFoundError`` for a missing model, ``TypeError`` for a wrong
dtype ...), so generic code keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable

from xpuruntime.policies._suggest import closest
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.errors import FallbackError

__all__ = [
    "CacheError",
    "DeviceNotFoundError",
    "EngineMemoryError",
    "EngineRunError",
    "HostShapeComputeError",
    "InputDtypeError",
    "InputError",
    "InputNameError",
    "InputShapeError",
    "InputShapeWarning",
    "InvalidModelError",
    "ModelNotFoundError",
    "ModelTypeError",
    "SessionClosedError",
    "did_you_mean",
]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``name`` looks like a typo of one of ``choices`` (the
    one suggestion rule: :func:`xpuruntime.policies._suggest.closest`)."""
    close = closest(name, choices)
    return f" (did you mean {close!r}?)" if close is not None else ""


class ModelNotFoundError(XpuRuntimeError, FileNotFoundError):
    """The model file does not exist."""


class InvalidModelError(XpuRuntimeError, ValueError):
    """The model file exists but the engine cannot load it (corrupt, unsupported IR ...)."""


class InputError(XpuRuntimeError, ValueError):
    """A ``run`` input does not match the model; the session stays usable."""


class InputNameError(InputError):
    """An input name is unknown or a required input is missing."""


class InputDtypeError(InputError, TypeError):
    """An input has another element type than the model expects (nothing is cast silently)."""


class InputShapeError(InputError):
    """An input has another rank or fixed dimension than the model expects."""


class DeviceNotFoundError(XpuRuntimeError, RuntimeError):
    """The requested device does not exist on this machine."""


class EngineRunError(XpuRuntimeError, RuntimeError):
    """The engine failed while running the model; the message carries the engine's reason."""


class EngineMemoryError(XpuRuntimeError, MemoryError):
    """The engine ran out of memory building or running the model (host or device); the
    message names the engine's report and what to try (smaller inputs, a lower precision,
    another device)."""


class CacheError(XpuRuntimeError, OSError):
    """A cache folder cannot be used (read-only, not a folder, unwritable) or configured."""


class ModelTypeError(XpuRuntimeError, TypeError):
    """The model is neither a path, nor the model's bytes, nor an ``onnx.ModelProto``."""


class SessionClosedError(XpuRuntimeError, RuntimeError):
    """The session was closed (``InferenceSession.close()``) and cannot run any more."""


class HostShapeComputeError(FallbackError):
    """``ExecutionPolicy(host_shape_compute="forbid")`` and the engine placed shape computation
    on the host; the message names the nodes."""


class InputShapeWarning(UserWarning):
    """Inputs give one named dimension two sizes in a call. Engines treat dimension names as
    hints and run such feeds, so this is a warning (also noted in the record), not an error."""
