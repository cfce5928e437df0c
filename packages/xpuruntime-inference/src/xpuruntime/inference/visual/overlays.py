"""Model Explorer node-data files from an execution record.

The format is Model Explorer's "node data" JSON (``model_explorer.node_data_builder``'s
``ModelNodeData``): ``{graph id: {"name", "results": {node id: {"value", "bgColor"}},
"gradient"}}``. Category overlays (placement, precision) carry a text value and a colour per
node; numeric overlays (time, difference) a number and a gradient Model Explorer colours by.
Each overlay says where its numbers came from in its name, and :func:`write_overlays` lists
the record nodes that match no graph node in ``index.json`` rather than dropping them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpuruntime.inference.visual.graph_ids import GraphIds, Matching, match_nodes
from xpuruntime.runtime.record import ExecutionRecord, NodeRecord

#: Node colours per placement class: on the requested device, host-side shape work, fallback.
PLACEMENT_COLOURS = {
    "requested": "#b7e4c7",
    "host_shape": "#a9d6f5",
    "fallback": "#f4a261",
}
#: Colour of a node whose engine reported no placement, or no precision.
UNKNOWN_COLOUR = "#e0e0e0"
PRECISION_COLOURS = {
    "fp32": "#cfe2ff",
    "tf32": "#b6d4fe",
    "fp16": "#ffe69c",
    "bf16": "#ffda6a",
    "int8": "#f1aeb5",
    "fp8": "#e685b5",
}
#: Low to high: numeric overlays run from pale to dark.
GRADIENT = [{"stop": 0, "bgColor": "#fff5eb"}, {"stop": 1, "bgColor": "#d94801"}]


@dataclass
class Overlay:
    """One node-data file: ``key`` (its file name), the name Model Explorer shows, per-node
    values (and colours), and what it rests on."""

    key: str
    name: str
    source: str
    values: dict[str, str | float] = field(default_factory=dict)
    colours: dict[str, str] = field(default_factory=dict)
    numeric: bool = False
    unmatched: list[str] = field(default_factory=list)

    def node_data(self, graph: str) -> dict[str, Any]:
        """The Model Explorer node-data JSON object of this overlay."""
        results: dict[str, dict[str, Any]] = {}
        for node_id, value in self.values.items():
            result: dict[str, Any] = {"value": value}
            if node_id in self.colours:
                result["bgColor"] = self.colours[node_id]
            results[node_id] = result
        data: dict[str, Any] = {"name": self.name, "results": results}
        if self.numeric:
            data["gradient"] = GRADIENT
        return {graph: data}


def _described(node: NodeRecord) -> str:
    return f"{node.name or '<unnamed>'} ({node.op_type})"


def placement_value(node: NodeRecord) -> str:
    """The text shown for a node: its placement class, and for one off the requested device
    where it ran and the record's reason."""
    if node.placement is None:
        return "not reported by the engine"
    if node.placement == "requested":
        return f"requested: on {node.chosen}"
    return f"{node.placement}: on {node.chosen} (requested {node.requested}): {node.reason}"


def placement_overlay(record: ExecutionRecord, matching: Matching) -> Overlay:
    overlay = Overlay(
        "placement",
        "placement (execution record)",
        "ExecutionRecord.nodes[].placement and reason",
        unmatched=[_described(n) for n in matching.unmatched],
    )
    for index, node_id in matching.ids.items():
        node = record.nodes[index]
        overlay.values[node_id] = placement_value(node)
        overlay.colours[node_id] = PLACEMENT_COLOURS.get(node.placement or "", UNKNOWN_COLOUR)
    return overlay


def precision_overlay(record: ExecutionRecord, matching: Matching) -> Overlay:
    overlay = Overlay(
        "precision",
        "precision (execution record)",
        "ExecutionRecord.nodes[].precision",
        unmatched=[_described(n) for n in matching.unmatched],
    )
    for index, node_id in matching.ids.items():
        precision = record.nodes[index].precision
        overlay.values[node_id] = precision or "unknown: the engine reported none"
        overlay.colours[node_id] = PRECISION_COLOURS.get(precision or "", UNKNOWN_COLOUR)
    return overlay


def numeric_overlay(
    key: str, name: str, source: str, values: Mapping[str, float], unmatched: Sequence[str] = ()
) -> Overlay:
    """A numeric overlay (per-node time, per-node difference) keyed by adapter node ids."""
    return Overlay(key, name, source, dict(values), numeric=True, unmatched=list(unmatched))


def record_overlays(record: ExecutionRecord, graph: GraphIds) -> list[Overlay]:
    """Placement and precision overlays of ``record`` on ``graph``."""
    matching = match_nodes(record.nodes, graph)
    return [placement_overlay(record, matching), precision_overlay(record, matching)]


def write_overlays(folder: Path, graph: GraphIds, overlays: Sequence[Overlay]) -> list[Path]:
    """One node-data file per overlay in ``folder``, and ``index.json`` saying for each file
    what it rests on and which record nodes match no graph node."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    index = []
    for overlay in overlays:
        path = folder / f"{overlay.key}.json"
        path.write_text(json.dumps(overlay.node_data(graph.graph), indent=1))
        written.append(path)
        index.append(
            {
                "file": path.name,
                "name": overlay.name,
                "source": overlay.source,
                "nodes": len(overlay.values),
                "unmatched": overlay.unmatched,
            }
        )
    (folder / "index.json").write_text(json.dumps({"graph": graph.graph, "files": index}, indent=1))
    return written
