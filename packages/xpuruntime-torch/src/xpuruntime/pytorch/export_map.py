"""What each xpuruntime op call became in an exported ONNX model, read from the model itself.

The dynamo exporter stamps every node with the call it was translated from
(``pkg.torch.onnx.fx_node`` metadata: ``%name : ... call_function[target=<op>]``); nodes
are grouped by that call, so the record lists exactly the nodes the graph holds after the
exporter's own optimisation, whatever form the translation took.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from xpuruntime.policies.bundle import ExportedNode, ExportedOp
from xpuruntime.policies.lock import Lockfile
from xpuruntime.pytorch.onnx_forms import Forms

__all__ = ["FAMILIES", "exported_ops", "input_shapes", "model_lock", "trained_kernels"]

#: xpuruntime torch op -> its kernel-policy entry (the "family" of its ONNX form).
FAMILIES: dict[str, str] = {
    "fused_attention": "attention",
    "fused_layernorm": "layernorm",
    "fused_add_layernorm": "layernorm",
    "fused_rmsnorm": "rmsnorm",
    "fused_add_rmsnorm": "rmsnorm",
    "fused_linear": "linear",
}

_CALL = re.compile(r"^%(?P<call>[\w.]+) : .*target=torch\.ops\.xpuruntime\.(?P<op>\w+)\.")


def _call_of(node: Any) -> tuple[str, str] | None:
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.fx_node":
            found = _CALL.match(prop.value)
            if found and found["op"] in FAMILIES:
                return found["call"], found["op"]
    return None


def _form(op: str, forms: Forms, op_types: set[str]) -> str:
    family = FAMILIES[op]
    if family == "linear":
        gelu = "; its gelu: " + forms.describe("gelu") if "Gelu" in op_types else ""
        return "MatMul + Add and the activation (ONNX has no fused linear op)" + gelu
    return forms.describe(family)


def exported_ops(model: Any, forms: Forms, trained: Mapping[str, list[str]]) -> list[ExportedOp]:
    """Per xpuruntime op call in ``model`` (an onnx ModelProto), the nodes it became."""
    calls: dict[str, tuple[str, list[ExportedNode]]] = {}
    for node in _nodes(model.graph):
        found = _call_of(node)
        if found is not None:
            call, op = found
            calls.setdefault(call, (op, []))[1].append(ExportedNode(node.name, node.op_type))
    return [
        ExportedOp(
            op=f"xpuruntime::{op}",
            call=call,
            family=FAMILIES[op],
            form=_form(op, forms, {n.op_type for n in nodes}),
            nodes=nodes,
            trained=trained.get(FAMILIES[op], []),
        )
        for call, (op, nodes) in calls.items()
    ]


def _nodes(graph: Any) -> Iterable[Any]:
    """Every node, those of subgraphs (If/Loop bodies) included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for sub in attribute.graphs:
                yield from _nodes(sub)


def input_shapes(model: Any, names: list[str]) -> dict[str, list[str | int]]:
    """Each input's dimensions as exported: a name where the dimension is dynamic."""
    shapes: dict[str, list[str | int]] = {}
    for value in model.graph.input:
        if value.name in names:
            dims = value.type.tensor_type.shape.dim
            shapes[value.name] = [d.dim_param or d.dim_value for d in dims]
    return shapes


def trained_kernels(decisions: Iterable[Any]) -> dict[str, list[str]]:
    """Policy family -> the kernels training decided for it, as ``kernel (status)``."""
    found: dict[str, set[str]] = {}
    families = set(FAMILIES.values())
    for decision in decisions:
        if decision.op in families:
            found.setdefault(decision.op, set()).add(f"{decision.kernel} ({decision.status})")
    return {family: sorted(kernels) for family, kernels in found.items()}


#: Policy family -> the per-call lock ops (core dispatcher, PyTorch) that decide for it.
_LOCK_OPS = {
    "attention": {"attention"},
    "layernorm": {"layernorm"},
    "rmsnorm": {"rmsnorm"},
    "linear": {"linear", "matmul"},
}


def model_lock(lock: Lockfile, ops: Iterable[ExportedOp]) -> tuple[Lockfile, list[str]]:
    """The lock entries that concern the exported model, and the ones left out (described).

    A lockfile collects every recording run that wrote to it, other models' included: a
    per-call entry of the core dispatcher or PyTorch is kept only when its op belongs to a
    family the exported graph holds. Process-wide switch entries and engines' entries stay.
    """
    wanted = set().union(*(_LOCK_OPS.get(op.family, {op.family}) for op in ops))
    kept, dropped = [], []
    for entry in lock:
        per_call = entry.domain in ("core", "pytorch") and entry.layout != "switches"
        if per_call and entry.op not in wanted:
            dropped.append(entry.describe())
        else:
            kept.append(entry)
    return Lockfile(kept, lock.environments), dropped
