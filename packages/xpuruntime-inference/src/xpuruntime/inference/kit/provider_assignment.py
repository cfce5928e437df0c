"""Where ONNX Runtime placed each node, from its own graph-assignment information.

ONNX Runtime (>= 1.22) records, when the session config key
``session.record_ep_graph_assignment_info`` is set, which execution provider each node was
assigned to (``InferenceSession.get_provider_graph_assignment_info``). Those become the
record's nodes; a node off the requested provider is classified (host-side shape computation
or fallback, :mod:`xpuruntime.inference.placement`) and the policy applied to it. Shared by
the ONNX Runtime engine and the QNN engine (the QNN EP is an ONNX Runtime provider).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.placement import (
    PlacedNode,
    ShapeAnalysis,
    classify,
    record_placement,
)

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

#: The config entry that makes ONNX Runtime keep the node assignment.
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"

# GetCpuPreferredNodes' report (fallback_cpu_capability.cc) of a node it moves to the CPU
# because "the CPU execution path is deemed faster than overhead involved with execution on
# other EPs capable of executing this node".
_CPU_PREFERRED = re.compile(
    r"Force fallback to CPU execution for node: (?P<name>.*?)(?: because|$)"
)


def cpu_preferred_nodes(logged: Iterable[tuple[int, str]]) -> frozenset[str]:
    """Nodes ONNX Runtime's partitioner said it keeps on the CPU as cheap shape work."""
    found = set()
    for _, message in logged:
        match = _CPU_PREFERRED.search(message)
        if match is not None:
            found.add(match["name"].strip())
    return frozenset(found)


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
    decisions: Decisions,
    nodes: list[PlacedNode],
    *,
    requested: str,
    graph: Any,
    precision: str | None,
    fallback_recorded: bool = False,
    cpu_preferred: frozenset[str] = frozenset(),
) -> None:
    """Classify ONNX Runtime's placement against ``graph`` (the model's GraphProto) and apply
    the policy to it (the fallback rule, host_shape_compute). ``cpu_preferred``: the nodes ONNX
    Runtime itself reported keeping on the CPU as shape work (:func:`cpu_preferred_nodes`);
    the engine's word wins over the graph analysis."""
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
        engine_shape_nodes=cpu_preferred,
        engine_shape_reason="ONNX Runtime's partitioner reports it keeps this node on the CPU "
        "because the CPU path is faster than copying its small inputs (GetCpuPreferredNodes)",
    )
    record_placement(
        decisions,
        classified,
        requested=requested,
        precision=precision,
        fallback_recorded=fallback_recorded,
    )
