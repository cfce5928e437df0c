"""Which model file an int8 session loads, and the check that it really is quantized.

int8 on an NPU means integer kernels, which need quantization parameters that only
calibration on real data can give. xpuruntime does not quantize behind the user's back
with made-up data: ``precision="int8"`` loads a model that already carries Q/DQ (ONNX) or
FakeQuantize (OpenVINO IR) nodes, either the model itself or ``ExecutionPolicy.quantized_model``.
:mod:`xpuruntime.npu.quantize` makes one with NNCF or onnxruntime.quantization.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xpuruntime.npu.errors import QuantizedModelRequiredError
from xpuruntime.npu.onnx_model import load_graph
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.record import SettingRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.record import ExecutionRecord

_ONNX_QUANT_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
        "DynamicQuantizeLinear",
    }
)
_HOW_TO = (
    "Quantize it with representative calibration inputs, for example "
    "xpuruntime.npu.quantize.quantize_for_openvino(model, calibration, 'model.int8.xml') (NNCF) or "
    "xpuruntime.npu.quantize.quantize_for_qnn(model, calibration, 'model.qdq.onnx') "
    "(onnxruntime.quantization), then pass ExecutionPolicy(precision='int8', "
    "quantized_model=<that file>). Or ask for precision='fp16'/'fp32'."
)


def is_quantized(path: Path) -> bool:
    """True when the model holds quantization nodes (ONNX Q/DQ family, or IR FakeQuantize)."""
    if path.suffix == ".xml":
        text = path.read_text(errors="replace")
        return 'type="FakeQuantize"' in text or 'type="FakeConvert"' in text
    return any(node.op_type in _ONNX_QUANT_OPS for node in load_graph(path).node)


def require_quantized_model(model: Path, policy: ExecutionPolicy, record: ExecutionRecord) -> Path:
    """The file to load: the model, or for int8 a quantized one (typed error when there is none)."""
    if policy.precision != "int8":
        if policy.quantized_model is not None:
            record.notes.append(
                f"quantized_model={policy.quantized_model!r} ignored: precision is {policy.precision!r}"
            )
        return model
    path = Path(policy.quantized_model) if policy.quantized_model is not None else model
    if not path.is_file():
        raise PolicyError(
            f"quantized_model {str(path)!r} does not exist; give the path of a quantized model."
        )
    if not is_quantized(path):
        raise QuantizedModelRequiredError(
            f"precision='int8' needs a quantized model, but {str(path)!r} has no quantization "
            f"(Q/DQ or FakeQuantize) nodes. {_HOW_TO}"
        )
    record.settings.append(
        SettingRecord("quantized_model", policy.quantized_model, str(path), True)
    )
    return path
