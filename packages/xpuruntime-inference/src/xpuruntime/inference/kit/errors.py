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

__all__ = ["build_error", "is_memory_failure", "memory_error", "memory_hints"]

_MEMORY = re.compile(
    r"out of memory|bad_alloc|failed to allocate|cannot allocate|could not allocate|"
    r"MEM_ALLOC|OUT_OF_MEMORY|insufficient memory|not enough memory",
    re.IGNORECASE,
)

# Bytes per weight of each stored precision: a smaller form of the weights is suggested only
# where the model is not stored that small already.
_WEIGHT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
_SMALLER = (("precision='fp16'", 2), ("an int8 model", 1))
_FRACTIONS = {2: "half", 4: "a quarter", 8: "an eighth"}


def memory_hints(precision: str | None = None) -> list[str]:
    """What to try after an out-of-memory failure, in the order that usually helps, for a
    model whose weights are held in ``precision`` (the precision it runs in, ``BuildPlan.
    precision``: the stored one unless the engine applies another; None: taken as fp32)."""
    size = _WEIGHT_BYTES.get(precision or "fp32", 4)
    smaller = [(what, size // each) for what, each in _SMALLER if each < size]
    hints = ["smaller inputs (a smaller batch or sequence length)"]
    if smaller:
        fractions = " or ".join(_FRACTIONS[ratio] for _, ratio in smaller)
        hints.append(f"{' or '.join(w for w, _ in smaller)} ({fractions} of the weights' memory)")
    hints.append("another device (device='cpu'), or freeing what else holds its memory")
    return hints


def is_memory_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is an engine's out-of-memory report."""
    return isinstance(exc, MemoryError) or _MEMORY.search(str(exc)) is not None


def memory_error(
    exc: BaseException, *, engine: str, doing: str, precision: str | None = None
) -> EngineMemoryError:
    """``exc`` as an EngineMemoryError that says what ran out and what to try for a model
    running in ``precision`` (see :func:`memory_hints`)."""
    return EngineMemoryError(
        f"{engine} ran out of memory {doing}: {type(exc).__name__}: {exc}. Try "
        + "; or ".join(memory_hints(precision))
    )


def build_error(
    exc: Exception, *, engine: str, model: Path, precision: str | None = None
) -> Exception:
    """The typed error for an engine's failure to build or load ``model`` (running in
    ``precision``, where known)."""
    if is_memory_failure(exc):
        return memory_error(exc, engine=engine, doing=f"building {model}", precision=precision)
    return InvalidModelError(f"{engine} cannot load {model}: {type(exc).__name__}: {exc}")
