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
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.placement import (
    Classified,
    PlacedNode,
    ShapeAnalysis,
    classify,
    explain_unshown,
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


# ONNX Runtime's function inliner prefixes the names it copies from an op's function body
# (nodes, values) with "_inlfunc_<op>_" (function_utils.cc).
_INLINED = re.compile(r"_inlfunc_(?P<op>[A-Za-z0-9]+)_")


def inlined_origins(partitioned: Any, model: Any, placed: Iterable[str]) -> dict[str, str]:
    """Per node of ``partitioned`` (ONNX Runtime's optimized GraphProto) that ``model`` (the
    model's GraphProto) does not have: which op's function body ONNX Runtime inlined it from.
    The inliner's name prefix says so; where the node's names carry none, the candidates are
    the model's function ops that ONNX Runtime did not place (it replaced them)."""
    have = {n.name for n in model.node}
    placed = set(placed)
    replaced = sorted(
        {n.op_type for n in model.node if n.name not in placed and _has_function_body(n)}
    )
    fallback = (
        f"inlined from {replaced[0]}'s ONNX function body"
        if len(replaced) == 1
        else f"inlined from the ONNX function body of one of {', '.join(replaced)}"
        if replaced
        else None
    )
    origins = {}
    for node in partitioned.node:
        if node.name in have:
            continue
        found = next(
            (m for v in [node.name, *node.output, *node.input] if (m := _INLINED.match(v))), None
        )
        origin = f"inlined from {found['op']}'s ONNX function body" if found else fallback
        if origin is not None:
            origins[node.name] = origin
    return origins


def _has_function_body(node: Any) -> bool:
    from onnx import defs

    domain = "" if node.domain == "ai.onnx" else node.domain
    if not defs.has(node.op_type, domain):
        return False
    schema: Any = defs.get_schema(node.op_type, domain)  # onnx's stubs lack the two below
    return bool(schema.has_function or schema.has_context_dependent_function)


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
    partitioned: Callable[[], Any] | None = None,
) -> None:
    """Classify ONNX Runtime's placement against ``graph`` (the model's GraphProto) and apply
    the policy to it (the fallback rule, host_shape_compute). ``cpu_preferred``: the nodes ONNX
    Runtime itself reported keeping on the CPU as shape work (:func:`cpu_preferred_nodes`);
    the engine's word wins over the graph analysis. ``partitioned`` returns the GraphProto ONNX
    Runtime actually partitioned (its optimized graph); it is called only when nodes off
    ``requested`` remain that the model graph does not show (ONNX Runtime made them, as when it
    inlines the function body of an op its provider lacks)."""
    elsewhere = [n for n in nodes if n.device != requested]
    placed = {n.name: n.device for n in nodes}
    analysis = None
    if elsewhere and graph is not None:
        analysis = ShapeAnalysis(graph, placed, requested)
    elsewhere_reason = (
        f"{requested} has no kernel for it or declined it (ONNX Runtime's graph partitioning)"
    )
    classified = classify(
        nodes,
        requested=requested,
        analysis=analysis,
        elsewhere_reason=elsewhere_reason,
        engine_shape_nodes=cpu_preferred,
        engine_shape_reason="ONNX Runtime's partitioner reports it keeps this node on the CPU "
        "because the CPU path is faster than copying its small inputs (GetCpuPreferredNodes)",
    )
    if partitioned is not None and graph is not None:
        classified = _judge_on_partitioned(
            classified, partitioned, graph, placed, requested, elsewhere_reason
        )
    record_placement(
        decisions,
        classified,
        requested=requested,
        precision=precision,
        fallback_recorded=fallback_recorded,
    )


def _judge_on_partitioned(
    classified: Sequence[Classified],
    partitioned: Callable[[], Any],
    graph: Any,
    placed: dict[str, str],
    requested: str,
    elsewhere_reason: str,
) -> list[Classified]:
    """The nodes the model graph does not show, judged on ONNX Runtime's partitioned graph."""
    if all(c.shown for c in classified):
        return list(classified)  # the common case: no second look, no cost
    try:
        optimized = partitioned()
    except Exception as exc:  # best effort: without that graph the nodes stay fallbacks
        why = f" (ONNX Runtime's partitioned graph could not be read: {exc})"
        return [
            c if c.shown else Classified(c.node, c.placement, c.reason + why, shown=False)
            for c in classified
        ]
    return explain_unshown(
        classified,
        ShapeAnalysis(optimized, placed, requested),
        origins=inlined_origins(optimized, graph, placed),
        elsewhere_reason=elsewhere_reason,
    )
