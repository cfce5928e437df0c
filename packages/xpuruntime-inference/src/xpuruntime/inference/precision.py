"""ExecutionPolicy.precision against what the engine can do with this model: one rule for
every engine, so the record's precision means the same on each.

* Precision not set (by no policy layer): the model runs in the precision its weights are
  stored in, recorded as such (requested ``None``). A dynamically quantized model is int8
  here on every engine, with no fallback.
* Set to what the model stores: runs so.
* Set to another precision the engine can apply to an fp32 model itself (TensorRT with
  builder flags, ONNX Runtime's CUDA EP with TF32, OpenVINO's inference precision hint):
  runs in it.
* Anything else is a precision fallback to the stored precision, under the fallback mode.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from xpuruntime.inference.model_info import ModelInfo
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

__all__ = ["apply_precision", "precision_given"]

_HOW_TO_CONVERT = {
    "fp16": "convert the model first (onnxconverter_common.float16.convert_float_to_float16)",
    "bf16": "export the model in bfloat16",
    "int8": "quantize it (onnxruntime.quantization) and pass ExecutionPolicy(quantized_model=...)",
    "fp8": "export the model with float8 Q/DQ nodes",
}
#: ExecutionPolicy's default precision: the value that means "not set" unless a layer set it.
_DEFAULT = "fp32"


def precision_given(decisions: Decisions) -> bool:
    """Whether a policy layer set the precision (the record's sources say which)."""
    policy, record = decisions.policy, decisions.record
    return policy.precision != _DEFAULT or "execution.precision" in record.policy_sources


def apply_precision(
    decisions: Decisions,
    info: ModelInfo | None,
    *,
    engine: str,
    supported: Collection[str],
) -> str:
    """Set ``record.precision`` and return the precision the model will run in.

    ``supported`` lists the precisions the engine can apply to an fp32 model itself.
    ``info`` None (a native engine format, not ONNX): the policy's precision, left for the
    engine to record.
    """
    requested: str = decisions.policy.precision
    if info is None:
        return requested
    stored = info.precision
    chosen: str
    if not precision_given(decisions):
        decisions.record.precision = Choice(
            None, stored, f"precision not set: the model's weights are stored in {stored}"
        )
        return stored
    if requested == stored:
        chosen, reason = stored, f"the model's weights are stored in {stored}"
    elif stored == "fp32" and requested in supported:
        chosen, reason = requested, f"{engine} computes the fp32 model in {requested}"
    else:
        chosen = stored
        reason = (
            f"{engine} runs this model's stored precision ({stored}) and cannot apply "
            f"{requested} to it here; "
            + _HOW_TO_CONVERT.get(requested, f"use an engine that supports {requested}")
        )
        decisions.fallback(what="precision", requested=requested, chosen=stored, reason=reason)
    decisions.record.precision = Choice(requested, chosen, reason)
    return chosen
