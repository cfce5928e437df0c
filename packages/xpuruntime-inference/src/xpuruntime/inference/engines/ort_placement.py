"""Where ONNX Runtime placed each node, from its own graph-assignment information.

ONNX Runtime (>= 1.22) records, when the session config key
``session.record_ep_graph_assignment_info`` is set, which execution provider each node was
assigned to (``InferenceSession.get_provider_graph_assignment_info``). Those become the
record's nodes; a node off the requested provider is classified (host-side shape computation
or fallback, :mod:`xpuruntime.inference.placement`) and the policy applied to it. Shared by
the ONNX Runtime engine and the QNN engine (the QNN EP is an ONNX Runtime provider).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpuruntime.inference.placement import (
    PlacedNode,
    ShapeAnalysis,
    classify,
    record_placement,
)

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.record import ExecutionRecord

#: The config entry that makes ONNX Runtime keep the node assignment.
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


def assigned_nodes(session: Any) -> list[PlacedNode] | None:
    """Nodes and their providers, or None when this ONNX Runtime cannot tell."""
    info = getattr(session, "get_provider_graph_assignment_info", None)
    if info is None:
        return None
    return [
        PlacedNode(node.name, node.op_type, subgraph.ep_name)
        for subgraph in info()
        for node in subgraph.get_nodes()
    ]


def can_report_assignment(ort: Any) -> bool:
    """Whether this ONNX Runtime reports per-node placement (>= 1.22)."""
    return hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")


def record_assignment(
    record: ExecutionRecord,
    nodes: list[PlacedNode],
    *,
    requested: str,
    policy: ExecutionPolicy,
    graph: Any,
    precision: str | None,
    fallback_recorded: bool = False,
) -> None:
    """Classify ONNX Runtime's placement against ``graph`` (the model's GraphProto) and apply
    ``policy`` to it (fallback mode, host_shape_compute)."""
    elsewhere = [n for n in nodes if n.device != requested]
    analysis = None
    if elsewhere and graph is not None:
        analysis = ShapeAnalysis(graph, {n.name: n.device for n in nodes}, requested)
    classified = classify(
        nodes,
        requested=requested,
        analysis=analysis,
        elsewhere_reason=f"{requested} has no kernel for it or declined it (ONNX Runtime's "
        f"graph partitioning)",
    )
    record_placement(
        record,
        classified,
        requested=requested,
        precision=precision,
        fallback=policy.fallback,
        host_shape_compute=policy.host_shape_compute,
        fallback_recorded=fallback_recorded,
    )
