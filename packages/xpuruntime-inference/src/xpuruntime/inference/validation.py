"""Check ``run`` feeds against the model's inputs before they reach the engine.

Engines report mismatches deep inside their own code with messages that name internal
buffers; this check names the input, the expected and the received dtype/shape, and lists
the model's inputs. It runs on every call, so the expected values are precomputed and the
common case (right names, dtypes and shapes) costs a few comparisons per input.

It is never stricter than the engine: it rejects what ONNX Runtime rejects (unknown or missing
names, element types, ranks, fixed dimensions) and nothing else. Symbolic dimension names are
hints, not constraints, for every engine: exporters write placeholders (``?``, an empty name,
``unk__N``, ``-1``) and reuse names for unrelated axes (``[-1, 3, '?', '?']`` for height and
width). Placeholders name nothing; a real name that takes two sizes in one call is reported
by :meth:`FeedValidator.disagreements`, as a warning, never as an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xpuruntime.inference.errors import (
    InputDtypeError,
    InputNameError,
    InputShapeError,
    did_you_mean,
)
from xpuruntime.inference.tensors import dtype_name, shape_of
from xpuruntime.runtime.engines import TensorInfo

#: Dimension names that name nothing: what exporters write for "unknown".
_PLACEHOLDER = re.compile(r"^(|\?|-1|None|unk__\d+)$")


def is_placeholder(symbol: str) -> bool:
    """Whether a symbolic dimension name is an exporter's placeholder for "unknown"."""
    return _PLACEHOLDER.match(symbol) is not None


def _shape(x: Any) -> tuple[int, ...]:
    """A feed's shape: tensors' own, or numpy's reading of a (nested) list."""
    return shape_of(x) if hasattr(x, "shape") else tuple(np.shape(x))


def describe_tensor(info: TensorInfo) -> str:
    """``input: float32[batch, 4]``."""
    dims = ", ".join("?" if d is None else str(d) for d in info.shape)
    return f"{info.name}: {info.dtype}[{dims}]"


def key_error(key: object, inputs: str) -> InputNameError:
    """The error for a feed keyed by something other than an input name (a string)."""
    return InputNameError(
        f"input names are strings, got the key {key!r} ({type(key).__name__}); the model's "
        f"inputs are: {inputs}"
    )


class _Expected:
    __slots__ = ("dtype", "fixed", "info", "numpy_dtype", "rank", "strings", "symbols")

    def __init__(self, info: TensorInfo) -> None:
        self.info = info
        self.dtype = info.dtype
        try:
            self.numpy_dtype: np.dtype[Any] | None = np.dtype(info.dtype)
        except TypeError:  # bfloat16, float8: not numpy dtypes, compared by name
            self.numpy_dtype = None
        # A string input takes every numpy string array (str_ of any width, object, bytes_),
        # as ONNX Runtime does: the kind is compared, not numpy's "<U0".
        self.strings = info.dtype == "str"
        self.rank = len(info.shape)
        self.fixed = tuple((i, d) for i, d in enumerate(info.shape) if isinstance(d, int))
        self.symbols = tuple(
            (i, d) for i, d in enumerate(info.shape) if isinstance(d, str) and not is_placeholder(d)
        )


class FeedValidator:
    """Validates feeds for one model; raises the typed input errors."""

    def __init__(self, inputs: Sequence[TensorInfo]) -> None:
        self._expected = {info.name: _Expected(info) for info in inputs}
        self._names = frozenset(self._expected)
        # Names that appear at more than one axis ("batch" in ids and mask) should agree.
        seen: dict[str, int] = {}
        for exp in self._expected.values():
            for _, symbol in exp.symbols:
                seen[symbol] = seen.get(symbol, 0) + 1
        self._shared_symbols = frozenset(s for s, n in seen.items() if n > 1)

    @property
    def has_shared_dimensions(self) -> bool:
        """Whether some named dimension appears at more than one axis."""
        return bool(self._shared_symbols)

    def model_inputs(self) -> str:
        return "; ".join(describe_tensor(e.info) for e in self._expected.values())

    def check(self, feeds: Mapping[str, Any]) -> None:
        """Raise the typed error for what the engine rejects: names, dtypes, ranks, fixed
        dimensions."""
        if feeds.keys() != self._names:
            self._raise_names(feeds)
        for name, x in feeds.items():
            exp = self._expected[name]
            if type(x) is np.ndarray and exp.numpy_dtype is not None:
                # The common case, inlined: this runs on every call.
                if (
                    x.dtype is not exp.numpy_dtype
                    and x.dtype != exp.numpy_dtype
                    and not (exp.strings and x.dtype.kind in "UOS")
                ):
                    self._raise_dtype(exp, x.dtype.name)
                shape: Sequence[int] = x.shape
            elif isinstance(x, (list, tuple)):
                # Lists become arrays of the input's element type in the engine kit (which
                # also refuses a ragged one): nothing to check before that.
                continue
            else:
                got = dtype_name(x)
                if got != exp.dtype:
                    self._raise_dtype(exp, got)
                shape = _shape(x)
            if len(shape) != exp.rank:
                raise InputShapeError(
                    f"input {name!r} expects rank {exp.rank} ({describe_tensor(exp.info)}), "
                    f"got shape {tuple(shape)} (rank {len(shape)})"
                )
            for axis, dim in exp.fixed:
                if shape[axis] != dim:
                    raise InputShapeError(
                        f"input {name!r} expects dimension {axis} to be {dim} "
                        f"({describe_tensor(exp.info)}), got shape {tuple(shape)}"
                    )

    def disagreements(self, feeds: Mapping[str, Any]) -> dict[str, str]:
        """Named dimensions that take two sizes in these feeds: name -> message.

        No engine enforces dimension names, so the caller warns; feeds the other checks reject
        are left to them (and to the engine).
        """
        bound: dict[str, tuple[str, int, int]] = {}
        found: dict[str, str] = {}
        for name, x in feeds.items():
            exp = self._expected.get(name)
            if exp is None or not exp.symbols:
                continue
            shape = x.shape if type(x) is np.ndarray else _shape(x)
            if len(shape) != exp.rank:
                continue
            for axis, symbol in exp.symbols:
                if symbol not in self._shared_symbols or symbol in found:
                    continue
                first = bound.setdefault(symbol, (name, axis, int(shape[axis])))
                if first[2] != shape[axis]:
                    found[symbol] = (
                        f"dimension {symbol!r} is {first[2]} in input {first[0]!r} (axis "
                        f"{first[1]}) but {shape[axis]} in input {name!r} (axis {axis}): the "
                        f"model names these axes alike, and the engine runs them anyway "
                        f"(dimension names are hints); check that the feeds are the intended ones"
                    )
        return found

    @staticmethod
    def _raise_dtype(exp: _Expected, got: str) -> None:
        raise InputDtypeError(
            f"input {exp.info.name!r} expects dtype {exp.dtype}, got {got}; nothing is cast "
            f"implicitly: convert it first (for numpy: x.astype({exp.dtype!r}))"
        )

    def _raise_names(self, feeds: Mapping[Any, Any]) -> None:
        for key in feeds:
            if not isinstance(key, str):
                raise key_error(key, self.model_inputs())
        unknown = [n for n in feeds if n not in self._names]
        missing = sorted(self._names - set(feeds))
        parts = [f"unknown input {n!r}{did_you_mean(n, self._names - set(feeds))}" for n in unknown]
        if missing:
            parts.append(f"missing input(s) {', '.join(repr(n) for n in missing)}")
        raise InputNameError(f"{'; '.join(parts)}. The model's inputs are: {self.model_inputs()}")
