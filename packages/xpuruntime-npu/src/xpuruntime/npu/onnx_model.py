"""Reading an ONNX model's declared inputs without building a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xpuruntime.runtime.engines import TensorInfo


def load_graph(path: Path) -> Any:
    """The model's GraphProto (weights in external files are not read)."""
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def graph_inputs(graph: Any) -> list[TensorInfo]:
    """Inputs that are not initializers; dims are ints, symbolic names, or None if unnamed."""
    import onnx

    initializers = {init.name for init in graph.initializer}
    infos = []
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims: list[int | str | None] = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or None)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        infos.append(TensorInfo(value.name, dtype, tuple(dims)))
    return infos


def load_inferred_graph(path: Path) -> Any:
    """The GraphProto with inferred value types (placement classification reads them); the
    uninferred graph where ONNX shape inference gives up on the model."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    try:
        return onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # inference is best effort: the graph itself is still right
        return model.graph


def graph_io_qdq(graph: Any) -> frozenset[str]:
    """QuantizeLinear nodes reading a graph input and DequantizeLinear nodes writing a graph
    output: the (de)quantization QNN's offload_graph_io_quantization leaves to the CPU EP."""
    inputs = {v.name for v in graph.input}
    outputs = {v.name for v in graph.output}
    return frozenset(
        node.name
        for node in graph.node
        if (node.op_type == "QuantizeLinear" and node.input[0] in inputs)
        or (node.op_type == "DequantizeLinear" and node.output[0] in outputs)
    )
