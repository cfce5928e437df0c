"""ExecutionPolicy.precision against what the engine can do with this model.

An engine either runs the element types stored in the model, or can itself lower precision
(TensorRT with builder flags, ONNX Runtime's CUDA EP with TF32). Anything else is a
precision fallback and goes through the policy's fallback mode.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from xpuruntime.inference.model_info import ModelInfo
from xpuruntime.runtime.record import Choice, ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy

_HOW_TO_CONVERT = {
    "fp16": "convert the model first (onnxconverter_common.float16.convert_float_to_float16)",
    "bf16": "export the model in bfloat16",
    "int8": "quantize it (onnxruntime.quantization) and pass ExecutionPolicy(quantized_model=...)",
    "fp8": "export the model with float8 Q/DQ nodes",
}


def apply_precision(
    policy: ExecutionPolicy,
    info: ModelInfo,
    *,
    engine: str,
    record: ExecutionRecord,
    supported: Collection[str],
) -> str:
    """Set ``record.precision`` and return the precision the model will run in.

    ``supported`` lists the precisions the engine can apply to an fp32 model itself.
    """
    requested: str = policy.precision
    stored = info.precision
    chosen: str
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
        record.fallback(
            what="precision",
            requested=requested,
            chosen=stored,
            reason=reason,
            mode=policy.fallback,
        )
    record.precision = Choice(requested, chosen, reason)
    return chosen
