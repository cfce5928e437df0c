"""What the ONNX file itself says: declared input dimensions, per-node output element types
and the model's floating-point precision. Read with the ``onnx`` package (graph only, no
external weights), independently of the engine that runs the model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.runtime.engines import TensorInfo

# onnx.TensorProto.DataType values -> names used in records.
_ELEM_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
}
_PRECISIONS = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "int8",
    "uint8": "int8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}
_QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearMatMul",
        "QLinearConv",
        "MatMulInteger",
        "ConvInteger",
        "DynamicQuantizeLinear",
        "MatMulNBits",
    }
)


def elem_type_name(elem_type: int) -> str:
    """The numpy-style name of an ``onnx.TensorProto.DataType`` value ("unknown" if none)."""
    return _ELEM_TYPES.get(elem_type, "unknown")


@dataclass(frozen=True)
class ModelInfo:
    """Facts read from the ONNX graph."""

    inputs: dict[str, tuple[int | str | None, ...]]
    input_types: dict[str, str]
    node_types: dict[str, str]
    op_types: frozenset[str]
    precision: str
    #: The GraphProto with inferred value types (placement classification reads it); held
    #: only while a session is created.
    graph: Any = field(default=None, repr=False, compare=False)

    def tensor_infos(self) -> list[TensorInfo]:
        """The graph inputs as TensorInfo (name, numpy dtype name, shape)."""
        return [TensorInfo(n, self.input_types[n], dims) for n, dims in self.inputs.items()]

    def node_precision(self, node_name: str) -> str | None:
        """Precision of a node's first output; an engine's fused node ("matmul/MatMulAddFusion")
        is looked up by the original node name it starts with."""
        found = self.node_types.get(node_name)
        if found is None:
            found = self.node_types.get(node_name.split("/", 1)[0], "")
        return _PRECISIONS.get(found)


def read_model_info(path: Path) -> ModelInfo:
    """Parse ``path`` (graph only) and infer intermediate types; InvalidModelError if unreadable."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises DecodeError, ValidationError, InferenceError ...
        raise InvalidModelError(
            f"{path} is not a readable ONNX model: {type(exc).__name__}: {exc}. Check the file "
            f"(python -c \"import onnx; onnx.checker.check_model('{path}')\") or re-export it"
        ) from exc
    graph = inferred.graph
    initializers = {t.name for t in graph.initializer}
    inputs = {
        vi.name: tuple(_dim(d) for d in vi.type.tensor_type.shape.dim)
        for vi in graph.input
        if vi.name not in initializers
    }
    input_types = {
        vi.name: elem_type_name(vi.type.tensor_type.elem_type)
        for vi in graph.input
        if vi.name not in initializers
    }
    value_types = {
        vi.name: _ELEM_TYPES.get(vi.type.tensor_type.elem_type, "")
        for vi in [*graph.value_info, *graph.output, *graph.input]
    }
    node_types = {
        node.name: value_types.get(node.output[0], "") for node in graph.node if node.output
    }
    op_types = frozenset(node.op_type for node in graph.node)
    return ModelInfo(
        inputs, input_types, node_types, op_types, _model_precision(graph, op_types), graph
    )


def _dim(d: object) -> int | str | None:
    if d.HasField("dim_value"):  # type: ignore[attr-defined]
        return int(d.dim_value)  # type: ignore[attr-defined]
    if d.HasField("dim_param"):  # type: ignore[attr-defined]
        return str(d.dim_param)  # type: ignore[attr-defined]
    return None


def _model_precision(graph: object, op_types: frozenset[str]) -> str:
    """The precision the weights are stored in ("int8" when the graph is quantized)."""
    if op_types & _QUANTIZED_OPS:
        return "int8"
    counts = Counter(
        _ELEM_TYPES.get(t.data_type, "")
        for t in graph.initializer  # type: ignore[attr-defined]
    )
    floats = [
        (n, c) for c, n in counts.items() if c in ("float32", "float16", "bfloat16", "float64")
    ]
    if not floats:
        return "fp32"
    return _PRECISIONS[max(floats)[1]]
