"""What an NPU engine session does exactly as ONNX Runtime's does: feed conversion, the
meaning of ``output_names``, refusing to run once closed, and reading the ONNX model's own
facts (names, stored precision) before the engine touches it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xpuruntime.inference.errors import InputError, InvalidModelError, SessionClosedError
from xpuruntime.inference.model_info import ModelInfo, read_model_info
from xpuruntime.inference.tensors import as_host_array
from xpuruntime.runtime.engines import TensorInfo


def list_dtypes(inputs: Sequence[TensorInfo]) -> dict[str, np.dtype[Any] | None]:
    """The element type a (nested) list feed becomes, per input, as ONNX Runtime converts it."""
    found: dict[str, np.dtype[Any] | None] = {}
    for info in inputs:
        try:
            found[info.name] = np.dtype(info.dtype)
        except TypeError:  # bfloat16, float8, str: numpy picks the type from the values
            found[info.name] = None
    return found


def host_feeds(
    feeds: Mapping[str, Any], dtypes: Mapping[str, np.dtype[Any] | None]
) -> dict[str, np.ndarray]:
    """Feeds as contiguous host arrays: lists converted to the input's type (as ONNX Runtime
    does), device tensors fetched; a ragged list is an InputError naming the input."""
    host: dict[str, np.ndarray] = {}
    for name, value in feeds.items():
        if isinstance(value, (list, tuple)):
            try:
                host[name] = np.asarray(value, dtype=dtypes.get(name))
            except (ValueError, TypeError) as exc:
                raise InputError(
                    f"input {name!r} is a list numpy cannot make one array of ({exc}); pass a "
                    f"numpy array, or a nested list with equal lengths at each level"
                ) from exc
            continue
        host[name] = np.ascontiguousarray(as_host_array(value)[0])
    return host


def wanted_outputs(output_names: Sequence[str] | None, every: Sequence[str]) -> list[str]:
    """The outputs to return: ``None`` or ``[]`` means all of them, as on ONNX Runtime."""
    return list(output_names) if output_names else list(every)


def closed(engine: str) -> SessionClosedError:
    """The error a closed engine session raises when asked to run."""
    return SessionClosedError(f"this {engine} session was closed; create a new one")


def inspect_onnx(path: Path) -> ModelInfo:
    """The ONNX model's own facts; InvalidModelError for a file that is no ONNX model (an
    empty file parses as an empty ModelProto, which no engine can run)."""
    info = read_model_info(path)
    if not info.graph.output:
        raise InvalidModelError(
            f"{path} holds no ONNX graph (no outputs): an empty or non-ONNX file. Check the "
            f"file or re-export the model"
        )
    return info


def onnx_outputs(info: ModelInfo) -> list[str]:
    """The model's own output names, in model order."""
    return [value.name for value in info.graph.output]
