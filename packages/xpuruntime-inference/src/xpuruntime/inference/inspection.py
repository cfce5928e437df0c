"""``xpuruntime inspect MODEL``: what an ONNX file holds, read with ``onnx`` and no engine.

The anchor is Polygraphy's ``inspect model``: inputs and outputs with element types and
symbolic dimensions, opsets and producer, an op histogram (subgraphs of If/Loop/Scan
included), initializers (count, bytes, element types) and external data files (present or
missing). Weights are not loaded: a multi-gigabyte model inspects in moments.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.inference.errors import InvalidModelError, ModelNotFoundError
from xpuruntime.inference.model_info import elem_type_name


class TensorSummary(msgspec.Struct, frozen=True):
    name: str
    dtype: str
    #: ints for fixed dimensions, names for symbolic ones, None for unknown ones
    shape: list[int | str | None] | None


class ExternalFile(msgspec.Struct, frozen=True):
    location: str
    tensors: int
    bytes: int
    present: bool


class ModelSummary(msgspec.Struct, frozen=True):
    """What ``xpuruntime inspect`` prints (and writes with ``--json``)."""

    path: str
    file_bytes: int
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph: str
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    nodes: int
    subgraphs: int
    ops: dict[str, int]
    initializers: int
    initializer_bytes: int
    initializer_dtypes: dict[str, int]
    external_data: list[ExternalFile]
    metadata: dict[str, str]


def inspect_model(path: Path) -> ModelSummary:
    """Read ``path`` (graph only) and summarise it; InvalidModelError if it is not ONNX."""
    import onnx

    if not path.is_file():
        raise ModelNotFoundError(f"model file {str(path)!r} does not exist")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise InvalidModelError(
            f"{path} is not a readable ONNX model: {type(exc).__name__}: {exc}"
        ) from exc
    graph = model.graph
    ops: Counter[str] = Counter()
    subgraphs = _count_ops(graph, ops)
    initializer_names = {t.name for t in graph.initializer}
    external: dict[str, list[int]] = {}
    dtypes: Counter[str] = Counter()
    total = 0
    for tensor in graph.initializer:
        size = _tensor_bytes(tensor)
        total += size
        dtypes[elem_type_name(tensor.data_type)] += 1
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            files = external.setdefault(info.get("location", "?"), [0, 0])
            files[0] += 1
            files[1] += int(info.get("length", size))
    producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
    return ModelSummary(
        path=str(path),
        file_bytes=path.stat().st_size,
        ir_version=int(model.ir_version),
        opsets={(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import},
        producer=producer or "(not recorded)",
        graph=graph.name,
        inputs=[_tensor(v) for v in graph.input if v.name not in initializer_names],
        outputs=[_tensor(v) for v in graph.output],
        nodes=sum(ops.values()),
        subgraphs=subgraphs,
        ops=dict(ops.most_common()),
        initializers=len(graph.initializer) + len(graph.sparse_initializer),
        initializer_bytes=total,
        initializer_dtypes=dict(dtypes.most_common()),
        external_data=[
            ExternalFile(location, n, size, (path.parent / location).is_file())
            for location, (n, size) in sorted(external.items())
        ],
        metadata={p.key: p.value for p in model.metadata_props},
    )


def _count_ops(graph: Any, ops: Counter[str]) -> int:
    """Add the graph's ops (and those of its subgraphs) to ``ops``; returns the subgraphs."""
    subgraphs = 0
    for node in graph.node:
        ops[f"{node.domain}.{node.op_type}" if node.domain else node.op_type] += 1
        for attribute in node.attribute:
            bodies = [*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])]
            for body in bodies:
                subgraphs += 1 + _count_ops(body, ops)
    return subgraphs


def _tensor(value: Any) -> TensorSummary:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return TensorSummary(value.name, kind or "unknown", None)
    tensor_type = value.type.tensor_type
    shape = None
    if tensor_type.HasField("shape"):
        shape = [_dim(d) for d in tensor_type.shape.dim]
    return TensorSummary(value.name, elem_type_name(tensor_type.elem_type), shape)


def _dim(d: Any) -> int | str | None:
    if d.HasField("dim_value"):
        return int(d.dim_value)
    if d.HasField("dim_param"):
        return str(d.dim_param)
    return None


def _tensor_bytes(tensor: Any) -> int:
    """Bytes of an initializer's data, from its element count (raw, typed or external)."""
    import onnx

    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):  # a type numpy has no dtype for: count raw bytes
        return len(tensor.raw_data)
    return int(math.prod(tensor.dims)) * int(itemsize)
