"""Check ``run`` feeds against the model's inputs before they reach the engine.

Engines report mismatches deep inside their own code with messages that name internal
buffers; this check names the input, the expected and the received dtype/shape, and lists
the model's inputs. It runs on every call, so the expected values are precomputed and the
common case (right names, dtypes and shapes) costs a few comparisons per input.
"""

from __future__ import annotations

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


def describe_tensor(info: TensorInfo) -> str:
    """``input: float32[batch, 4]``."""
    dims = ", ".join("?" if d is None else str(d) for d in info.shape)
    return f"{info.name}: {info.dtype}[{dims}]"


class _Expected:
    __slots__ = ("dtype", "fixed", "info", "numpy_dtype", "rank", "symbols")

    def __init__(self, info: TensorInfo) -> None:
        self.info = info
        self.dtype = info.dtype
        try:
            self.numpy_dtype: np.dtype[Any] | None = np.dtype(info.dtype)
        except TypeError:  # bfloat16, float8: not numpy dtypes, compared by name
            self.numpy_dtype = None
        self.rank = len(info.shape)
        self.fixed = tuple((i, d) for i, d in enumerate(info.shape) if isinstance(d, int))
        self.symbols = tuple((i, d) for i, d in enumerate(info.shape) if isinstance(d, str))


class FeedValidator:
    """Validates feeds for one model; raises the typed input errors."""

    def __init__(self, inputs: Sequence[TensorInfo]) -> None:
        self._expected = {info.name: _Expected(info) for info in inputs}
        self._names = frozenset(self._expected)
        # Symbols that appear in more than one input must agree ("batch" in ids and mask).
        seen: dict[str, int] = {}
        for exp in self._expected.values():
            for _, symbol in exp.symbols:
                seen[symbol] = seen.get(symbol, 0) + 1
        self._shared_symbols = frozenset(s for s, n in seen.items() if n > 1)

    @property
    def has_shared_dimensions(self) -> bool:
        """Whether some symbolic dimension appears in more than one input."""
        return bool(self._shared_symbols)

    def model_inputs(self) -> str:
        return "; ".join(describe_tensor(e.info) for e in self._expected.values())

    def check(self, feeds: Mapping[str, Any]) -> None:
        if feeds.keys() != self._names:
            self._raise_names(feeds)
        bound: dict[str, tuple[str, int]] = {}
        for name, x in feeds.items():
            exp = self._expected[name]
            if type(x) is np.ndarray and exp.numpy_dtype is not None:
                # The common case, inlined: this runs on every call.
                if x.dtype is not exp.numpy_dtype and x.dtype != exp.numpy_dtype:
                    self._raise_dtype(exp, x.dtype.name)
                shape: Sequence[int] = x.shape
            else:
                got = dtype_name(x)
                if got != exp.dtype:
                    self._raise_dtype(exp, got)
                shape = shape_of(x)
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
            if self._shared_symbols:
                self._check_symbols(exp, shape, bound)

    @staticmethod
    def _raise_dtype(exp: _Expected, got: str) -> None:
        raise InputDtypeError(
            f"input {exp.info.name!r} expects dtype {exp.dtype}, got {got}; nothing is cast "
            f"implicitly: convert it first (for numpy: x.astype({exp.dtype!r}))"
        )

    def _check_symbols(
        self, exp: _Expected, shape: Sequence[int], bound: dict[str, tuple[str, int]]
    ) -> None:
        for axis, symbol in exp.symbols:
            if symbol not in self._shared_symbols:
                continue
            first = bound.setdefault(symbol, (exp.info.name, int(shape[axis])))
            if first[1] != shape[axis]:
                raise InputShapeError(
                    f"dimension {symbol!r} is {first[1]} in input {first[0]!r} but "
                    f"{shape[axis]} in input {exp.info.name!r}; inputs sharing a dimension "
                    f"name must agree"
                )

    def _raise_names(self, feeds: Mapping[str, Any]) -> None:
        unknown = [n for n in feeds if n not in self._names]
        missing = sorted(self._names - set(feeds))
        parts = [f"unknown input {n!r}{did_you_mean(n, self._names - set(feeds))}" for n in unknown]
        if missing:
            parts.append(f"missing input(s) {', '.join(repr(n) for n in missing)}")
        raise InputNameError(f"{'; '.join(parts)}. The model's inputs are: {self.model_inputs()}")
