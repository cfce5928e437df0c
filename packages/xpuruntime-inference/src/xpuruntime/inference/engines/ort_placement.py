"""Where ONNX Runtime placed each node, from its own graph-assignment information.

ONNX Runtime (>= 1.22) records, when the session config key
``session.record_ep_graph_assignment_info`` is set, which execution provider each node was
assigned to (``InferenceSession.get_provider_graph_assignment_info``). Those become the
record's nodes, and every node that did not land on the requested provider is a fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xpuruntime.runtime.record import ExecutionRecord, FallbackMode, NodeRecord

_SHOWN_NODES = 10


@dataclass(frozen=True)
class AssignedNode:
    name: str
    op_type: str
    provider: str


def assigned_nodes(session: Any) -> list[AssignedNode] | None:
    """Nodes and their providers, or None when this ONNX Runtime cannot tell."""
    info = getattr(session, "get_provider_graph_assignment_info", None)
    if info is None:
        return None
    return [
        AssignedNode(node.name, node.op_type, subgraph.ep_name)
        for subgraph in info()
        for node in subgraph.get_nodes()
    ]


def name_nodes(nodes: list[AssignedNode]) -> str:
    """``'mm0' (MatMul), 'relu0' (Relu)``, shortened past ten nodes."""
    shown = ", ".join(f"{n.name or '<unnamed>'!r} ({n.op_type})" for n in nodes[:_SHOWN_NODES])
    more = len(nodes) - _SHOWN_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def record_placement(
    record: ExecutionRecord,
    nodes: list[AssignedNode],
    *,
    requested: str,
    precision: str | None,
    mode: FallbackMode,
) -> None:
    """Fill ``record.nodes`` and apply the fallback mode to nodes placed elsewhere."""
    record.nodes.extend(
        NodeRecord(
            name=n.name,
            op_type=n.op_type,
            requested=requested,
            chosen=n.provider,
            precision=precision,
        )
        for n in nodes
    )
    elsewhere = [n for n in nodes if n.provider != requested]
    if elsewhere:
        chosen = ", ".join(sorted({n.provider for n in elsewhere}))
        record.fallback(
            what=f"{len(elsewhere)} node(s) {name_nodes(elsewhere)}",
            requested=requested,
            chosen=chosen,
            reason=f"{requested} has no kernel for them or declined them (ONNX Runtime's "
            f"graph partitioning)",
            mode=mode,
        )
