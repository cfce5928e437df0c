"""Node ids as Model Explorer's ONNX adapter (``model-explorer-onnx``) gives them, and which
record node is which graph node.

The adapter names a node by its ONNX name. Before that, onnx-ir's ``NameFixPass`` names the
unnamed ones ``node``, ``node_1``, ... and renames a duplicate ``x`` to ``x_1`` (one counter
per base name for the whole model, one set of used names per graph, subgraph nodes visited
right after the node that holds them); then ``If`` branches are drawn inline, their nodes
named ``<if node>/<branch>/<node>``. Node-data files are keyed by these ids, so they are
computed here with the same rules (checked against the adapter itself in the tests).

Engines name record nodes by the model's names; an unnamed ONNX node has an empty name in
ONNX Runtime's placement. Those are matched to the model's unnamed nodes of the same op type
in order, only where both sides have the same number of them; anything else (a node an
engine's optimizer made, a TensorRT layer) matches no graph node and is listed as unmatched,
never guessed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.runtime.record import NodeRecord


@dataclass(frozen=True)
class GraphNode:
    """One ONNX node: its name in the file (may be empty), op type, outputs and adapter id."""

    id: str
    name: str
    op_type: str
    outputs: tuple[str, ...]
    #: Position in the main graph (the index engines number it by); None in a branch.
    index: int | None = None


@dataclass(frozen=True)
class GraphIds:
    """The adapter's id of the main graph (its name, empty if it has none) and of every
    node it draws in it."""

    graph: str
    nodes: tuple[GraphNode, ...]


@dataclass
class Matching:
    """Record nodes (by index in ``record.nodes``) -> adapter node ids, and the unmatched."""

    ids: dict[int, str] = field(default_factory=dict)
    unmatched: list[NodeRecord] = field(default_factory=list)
    #: Record indices matched by order among unnamed nodes of one op type, not by name.
    by_order: set[int] = field(default_factory=set)


def _unique(preferred: str, used: set[str], counter: Counter[str]) -> str:
    name = preferred
    while name in used:
        counter[preferred] += 1
        name = f"{preferred}_{counter[preferred]}"
    used.add(name)
    return name


def _walk(graph: Any, counter: Counter[str], out: list[GraphNode], *, main: bool) -> None:
    used: set[str] = set()
    for index, node in enumerate(graph.node):
        node_id = _unique(node.name or "node", used, counter)
        out.append(
            GraphNode(node_id, node.name, node.op_type, tuple(node.output), index if main else None)
        )
        for attribute in node.attribute:
            if attribute.type != attribute.GRAPH:
                continue
            # If branches are drawn inline under the If node; other subgraphs (Loop, Scan
            # bodies) become graphs of their own, whose nodes are not part of this graph.
            inline = node.op_type == "If" and node.domain in ("", "ai.onnx")
            branch: list[GraphNode] = []
            _walk(attribute.g, counter, branch, main=False)
            if inline:
                out.extend(
                    GraphNode(f"{node_id}/{attribute.name}/{b.id}", b.name, b.op_type, b.outputs)
                    for b in branch
                )


def read_graph_ids(model: Path) -> GraphIds:
    """The adapter's graph id and node ids of ``model`` (its weights are not read)."""
    import onnx

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:
        raise InvalidModelError(f"cannot read {model} as an ONNX model: {exc}") from exc
    nodes: list[GraphNode] = []
    _walk(proto.graph, Counter(), nodes, main=True)
    return GraphIds(proto.graph.name, tuple(nodes))


def match_nodes(records: Sequence[NodeRecord], graph: GraphIds) -> Matching:
    """Which adapter node each record node is (see the module doc for the rules)."""
    by_name: dict[str, list[GraphNode]] = defaultdict(list)
    unnamed: dict[str, list[GraphNode]] = defaultdict(list)
    for node in graph.nodes:
        if node.name:
            by_name[node.name].append(node)
        else:
            unnamed[node.op_type].append(node)
    matching = Matching()
    pending: dict[str, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        named = by_name.get(record.name, [])
        if record.name and len(named) == 1 and named[0].op_type == record.op_type:
            matching.ids[index] = named[0].id
        elif not record.name:
            pending[record.op_type].append(index)
        else:
            matching.unmatched.append(record)
    for op_type, indices in pending.items():
        candidates = unnamed.get(op_type, [])
        if len(candidates) != len(indices):
            matching.unmatched.extend(records[i] for i in indices)
            continue
        for index, node in zip(indices, candidates, strict=True):
            matching.ids[index] = node.id
            matching.by_order.add(index)
    return matching
