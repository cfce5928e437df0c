"""The behaviour every engine session shares, implemented once: :class:`KitSession`.

An adapter's session subclasses :class:`KitSession` and supplies :meth:`KitSession.execute`
(and :meth:`KitSession.release` when it holds resources). The contract, the same on every
engine:

* **names**: inputs and outputs carry the model's own names (an engine that renames them
  maps back before building its TensorInfo);
* **feeds**: numpy arrays pass as they are; a (nested) list becomes an array of the input's
  element type, as ONNX Runtime does, and a ragged one is an InputShapeError; a key that is
  not a string is an InputNameError; device tensors (DLPack, CUDA arrays) are the engine's;
* **output_names**: None or an empty list means every output in model order (ONNX
  Runtime's meaning of ``[]``); otherwise exactly the named outputs in that order;
* **closed**: :meth:`close` releases the engine's objects; ``run`` afterwards raises
  SessionClosedError (closing twice does nothing);
* **errors**: an engine's out-of-memory report during a run is an EngineMemoryError that
  says what to try; other failures propagate for the caller to explain (the session
  checks the feeds then, to raise the typed input error).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xpuruntime.inference.errors import InputDtypeError, InputShapeError, SessionClosedError
from xpuruntime.inference.kit.errors import is_memory_failure, memory_error
from xpuruntime.inference.validation import describe_tensor, key_error
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.engines import EngineSession, TensorInfo

__all__ = ["KitSession"]


def _numpy_dtype(name: str) -> np.dtype[Any] | None:
    if name in ("str", "string", "object"):
        return np.dtype(str)
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16, float8: no numpy dtype
        return None


class KitSession(EngineSession):
    """An engine session under the kit's behaviour contract (see the module docstring)."""

    #: The precision the model runs in (set by the kit's pipeline): what an out-of-memory
    #: error suggests depends on it (no "an int8 model" for an int8 one).
    precision: str | None = None

    def __init__(
        self, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], *, engine: str
    ) -> None:
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._output_names = [o.name for o in self._outputs]
        self._engine_label = engine
        self._list_dtypes = {i.name: _numpy_dtype(i.dtype) for i in self._inputs}
        self._closed = False

    # -- what an adapter supplies -----------------------------------------------------------
    @abc.abstractmethod
    def execute(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        """Run once: ``feeds`` hold arrays or device tensors under string names; return the
        outputs ``names`` (model names, in that order) by name."""

    def release(self) -> None:
        """Free the engine's objects (called once, by :meth:`close`)."""

    # -- the contract -----------------------------------------------------------------------
    @property
    def inputs(self) -> Sequence[TensorInfo]:
        return self._inputs

    @property
    def outputs(self) -> Sequence[TensorInfo]:
        return self._outputs

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.release()

    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, Any]:
        if self._closed:
            raise SessionClosedError(
                f"this {self._engine_label} session was closed; create a new one"
            )
        names = list(output_names) if output_names else self._output_names
        for key, x in feeds.items():
            if type(x) is not np.ndarray or type(key) is not str:
                feeds = self._converted(feeds)
                break
        try:
            return self.execute(feeds, names)
        except XpuRuntimeError:
            raise
        except Exception as exc:
            if self._closed:  # closed by another thread while this run was in flight
                raise SessionClosedError(
                    f"this {self._engine_label} session was closed during the run"
                ) from exc
            if is_memory_failure(exc):
                raise memory_error(
                    exc, engine=self._engine_label, doing="running", precision=self.precision
                ) from exc
            raise

    def _converted(self, feeds: Mapping[Any, Any]) -> dict[str, Any]:
        """Feeds with string keys and lists as arrays of the input's element type (the
        mapping's key type is not trusted: callers pass whatever they have)."""
        converted: dict[str, Any] = {}
        for key, x in feeds.items():
            if not isinstance(key, str):
                raise key_error(key, "; ".join(describe_tensor(i) for i in self._inputs))
            if isinstance(x, (list, tuple)):
                try:
                    x = np.asarray(x, dtype=self._list_dtypes.get(key))
                except (ValueError, TypeError) as exc:
                    if "inhomogeneous" in str(exc) or "sequence" in str(exc):
                        raise InputShapeError(
                            f"input {key!r} is a ragged nested list ({exc}); give every row "
                            f"the same length, or pass an array"
                        ) from exc
                    raise InputDtypeError(
                        f"input {key!r}: the list's values are not "
                        f"{self._list_dtypes.get(key)} ({exc}); pass an array of that type"
                    ) from exc
            converted[key] = x
        return converted
