"""Reading a model into OpenVINO: typed errors for what it cannot read or run, and the
model's own input/output names (OpenVINO's compiled ports carry merged tensor names and
``get_any_name()`` may return an internal one, ``/Cast_1_output_0`` for ``input_0``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.inference.model_info import ModelInfo
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.errors import UnsupportedOperationError

# OpenVINO's ONNX frontend names the operations it could not convert in one of two ways.
_UNCONVERTED = re.compile(
    r"(?:No conversion rule found for operations?|Conversion is failed for): ([^\n]*?)(?:WARNING|$)"
)
_STRING = 8  # onnx.TensorProto.STRING


def refusal(exc: Exception, path: Path, version: str, step: str) -> XpuRuntimeError:
    """OpenVINO's RuntimeError from reading or compiling ``path`` as a typed error: operations
    it has no conversion for are an UnsupportedOperationError naming them; anything else
    while reading is a model OpenVINO cannot read."""
    message = " ".join(str(exc).split())
    unconverted = _UNCONVERTED.search(message)
    if unconverted is not None:
        return UnsupportedOperationError(
            f"OpenVINO {version} cannot run {path}: it has no conversion for the operation(s) "
            f"{unconverted.group(1).strip()}. Run the model with engine='onnxruntime'"
        )
    if step == "compile":
        return UnsupportedOperationError(
            f"OpenVINO {version} read {path} but cannot compile it: {message}"
        )
    return InvalidModelError(f"OpenVINO {version} cannot read {path}: {message}")


def refuse_strings(info: ModelInfo, path: Path) -> None:
    """OpenVINO's CPU plugin aborts the process on string tensors at the graph boundary
    (``free(): invalid pointer`` in 2026.4): refused up front, naming them."""
    values = [*info.graph.input, *info.graph.output]
    strings = [v.name for v in values if v.type.tensor_type.elem_type == _STRING]
    if strings:
        raise UnsupportedOperationError(
            f"OpenVINO cannot run {path}: its input/output(s) {strings} are string tensors, "
            f"which OpenVINO's plugins do not run. Run the model with engine='onnxruntime'"
        )


def port_names(ports: Sequence[Any], declared: Sequence[str] | None) -> list[str]:
    """The model's own name of each port: the ONNX graph's names in order (OpenVINO keeps the
    ONNX input and output order), else OpenVINO's name for an IR model."""
    if declared is not None and len(declared) == len(ports):
        return list(declared)
    return [port.get_any_name() for port in ports]


def onnx_io(info: ModelInfo | None) -> tuple[list[str] | None, list[str] | None]:
    """(input names, output names) the ONNX model declares; (None, None) for an IR model."""
    if info is None:
        return None, None
    return list(info.inputs), [value.name for value in info.graph.output]
