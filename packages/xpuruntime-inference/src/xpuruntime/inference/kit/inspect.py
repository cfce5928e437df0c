"""The kit's first step: the model file, read and checked before any engine sees it.

Every engine gets the same typed error for a file that is not an ONNX model (empty,
truncated, zero-filled, text, garbage): :class:`InvalidModelError`, raised here, instead of
each engine's own parser error (protobuf's DecodeError, OpenVINO's RuntimeError ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xpuruntime.inference.errors import InvalidModelError, ModelNotFoundError
from xpuruntime.inference.model_info import ModelInfo, read_model_info
from xpuruntime.inference.settings import add_setting

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

__all__ = ["inspect_model", "pick_model"]

#: Model formats an engine reads natively beside ONNX (OpenVINO IR); the kit leaves their
#: checks to the engine.
NATIVE_FORMATS = frozenset({".xml"})


def inspect_model(path: Path) -> ModelInfo | None:
    """What the graph says (inputs, op types, stored precision), or None for a native
    engine format; InvalidModelError for anything that is not a usable ONNX model."""
    if path.suffix.lower() in NATIVE_FORMATS:
        return None
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read the model {path}: {exc}") from exc
    if size == 0:
        raise InvalidModelError(f"{path} is empty (0 bytes): not an ONNX model; re-export it")
    info = read_model_info(path)
    graph = info.graph
    if graph is None or (not len(graph.node) and not len(graph.output)):
        raise InvalidModelError(
            f"{path} holds no ONNX graph (no nodes, no outputs): it is not an ONNX model, or "
            f"it was truncated or overwritten; re-export it"
        )
    return info


def pick_model(model: Path, decisions: Decisions) -> Path:
    """The quantized model the policy names, when it asks for int8 and gives one."""
    policy = decisions.policy
    if policy.precision != "int8" or not policy.quantized_model:
        return model
    quantized = Path(policy.quantized_model).expanduser()
    if not quantized.is_file():
        raise ModelNotFoundError(
            f"ExecutionPolicy.quantized_model {str(quantized)!r} does not exist; quantize the "
            f"model first (onnxruntime.quantization.quantize_static) or remove the setting"
        )
    add_setting(
        decisions.record,
        "quantized_model",
        str(quantized),
        str(quantized),
        True,
        "runs the quantized model instead of the fp32 one",
    )
    return quantized
