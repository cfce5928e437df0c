"""Engine failures as typed xpuruntime errors, the same way for every engine.

An engine reports running out of memory in its own words (``bad_alloc``, ONNX Runtime's
``Failed to allocate memory``, CUDA's ``out of memory``, QNN's ``QNN_COMMON_ERROR_MEM_ALLOC``,
OpenVINO's ``Cannot allocate``); those become :class:`EngineMemoryError` with what to try.
Any other build failure is an :class:`InvalidModelError` carrying the engine's message.
"""

from __future__ import annotations

import re
from pathlib import Path

from xpuruntime.inference.errors import EngineMemoryError, InvalidModelError

__all__ = ["build_error", "is_memory_failure", "memory_error"]

_MEMORY = re.compile(
    r"out of memory|bad_alloc|failed to allocate|cannot allocate|could not allocate|"
    r"MEM_ALLOC|OUT_OF_MEMORY|insufficient memory|not enough memory",
    re.IGNORECASE,
)

#: What to try, in the order that usually helps.
MEMORY_HINTS = (
    "smaller inputs (a smaller batch or sequence length)",
    "precision='fp16' or an int8 model (half or a quarter of the weights' memory)",
    "another device (device='cpu'), or freeing what else holds its memory",
)


def is_memory_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is an engine's out-of-memory report."""
    return isinstance(exc, MemoryError) or _MEMORY.search(str(exc)) is not None


def memory_error(exc: BaseException, *, engine: str, doing: str) -> EngineMemoryError:
    """``exc`` as an EngineMemoryError that says what ran out and what to try."""
    return EngineMemoryError(
        f"{engine} ran out of memory {doing}: {type(exc).__name__}: {exc}. Try "
        + "; or ".join(MEMORY_HINTS)
    )


def build_error(exc: Exception, *, engine: str, model: Path) -> Exception:
    """The typed error for an engine's failure to build or load ``model``."""
    if is_memory_failure(exc):
        return memory_error(exc, engine=engine, doing=f"building {model}")
    return InvalidModelError(f"{engine} cannot load {model}: {type(exc).__name__}: {exc}")
