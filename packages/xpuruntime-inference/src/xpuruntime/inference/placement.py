"""Where each node ran, classified: on the requested device, host-side shape computation, or
a fallback. One classification for every engine (ONNX Runtime CPU/CUDA, QNN, OpenVINO).

A node the engine did not place on the requested device is one of two things:

* **host-side shape computation** (``placement="host_shape"``): arithmetic on tensor shapes
  that the engine keeps on the host by design. ONNX Runtime's partitioner does this for every
  GPU provider (``GetCpuPreferredNodes`` in ``fallback_cpu_capability.cc``): the consumers of
  CPU-resident outputs (``Shape``, ``Size``) whose inputs are all such host tensors, small
  initializers (<= 100 elements) or graph inputs, and none of them 16-bit or 8-bit floats, run
  on the CPU, because copying a few int64 values to the device and back costs more than the
  work. :class:`ShapeAnalysis` replays that rule on the model graph. ``Shape``/``Size`` on the
  host read only metadata and count as shape computation too. These nodes follow
  ``ExecutionPolicy.host_shape_compute``: ``"allow"`` records them, ``"forbid"`` raises
  :class:`HostShapeComputeError` naming them.
* **fallback** (``placement="fallback"``): anything else. The provider has no kernel for the
  op, dtype or attribute, or declined it; the node computes on tensor data (or on the output of
  another fallback). These follow ``ExecutionPolicy.fallback`` through
  :meth:`ExecutionRecord.fallback`.

The engine says where nodes ran (ONNX Runtime's graph-assignment information, OpenVINO's
``EXECUTION_DEVICES``); the graph says what they compute. A node the graph does not show (made
by the engine's optimizer) cannot be shown to be shape computation and counts as a fallback,
with that reason, unless the graph the engine partitioned (its own optimized graph, where the
engine can write it) shows it: :func:`explain_unshown`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.errors import HostShapeComputeError
from xpuruntime.runtime.record import NodeRecord, Placement

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

#: Ops whose output lives on the host whatever the device (their GPU kernels write the result
#: to CPU memory): where a shape subgraph starts.
SHAPE_SOURCES = frozenset({"Shape", "Size"})
#: Ops that build or index shapes (the ops of exporters' shape subgraphs).
SHAPE_OPS = frozenset(
    {
        "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Equal", "Where", "Add",
        "Sub", "Mul", "Div", "Range", "Reshape", "Expand", "ConstantOfShape", "ReduceProd",
        "Greater", "Less", "Not", "And", "Or", "Max", "Min", "Identity", "Neg", "Abs",
    }
)  # fmt: skip
# int64, int32, bool (onnx.TensorProto.DataType): the element types of shape values.
_SHAPE_TYPES = frozenset({7, 6, 9})
#: ONNX Runtime's limit for an initializer a CPU-preferred node may read (kSmallInitializerThreshold).
SMALL_INITIALIZER = 100
# Element types that keep a node off ONNX Runtime's CPU-preferred list (float16, bfloat16, the
# float8 formats): onnx.TensorProto.DataType values.
_LOW_PRECISION_FLOATS = {10: "float16", 16: "bfloat16", 17: "float8", 18: "float8", 19: "float8", 20: "float8"}  # fmt: skip
# How ONNX Runtime's optimizer renames what it copies, inlines or fuses: GenerateNodeName's
# "_token_<n>" suffix, If-constant-folding's "_if_then_branch..._" prefix, a fusion's
# "<first node>/<Name>Fusion".
_GENERATED_SUFFIX = re.compile(r"(_token_\d+)+$|/\w*Fusion$")
_INLINED_PREFIX = re.compile(r"^_if_(?:then|else)_branch(?:_token_\d+)?_")
_SHOWN_NODES = 10


@dataclass(frozen=True)
class PlacedNode:
    """A node and where the engine placed it (an execution provider, an OpenVINO device), with
    the kernel and precision where the engine reports them per node."""

    name: str
    op_type: str
    device: str
    kernel: str | None = None
    precision: str | None = None


@dataclass(frozen=True)
class Classified:
    """A placed node with its placement class and the reason for it."""

    node: PlacedNode
    placement: Placement
    reason: str = ""
    #: False when the analysed graph did not show the node (a fallback for want of evidence).
    shown: bool = True


def name_nodes(nodes: Sequence[PlacedNode]) -> str:
    """``'mm0' (MatMul), 'relu0' (Relu)``, shortened past ten nodes."""
    shown = ", ".join(f"{n.name or '<unnamed>'!r} ({n.op_type})" for n in nodes[:_SHOWN_NODES])
    more = len(nodes) - _SHOWN_NODES
    return shown + (f" and {more} more" if more > 0 else "")


class ShapeAnalysis:
    """ONNX Runtime's CPU-preferred rule replayed on a model graph, for one placement.

    ``placed`` maps node names to the device the engine used; ``requested`` is the device that
    was asked for. :meth:`verdict` says, for a node placed elsewhere, whether it is host-side
    shape computation and why (or why not). Each graph (the main graph and every control-flow
    body) is analysed on its own, as ONNX Runtime partitions them: a subgraph's formal inputs
    count as graph inputs, values from the enclosing graph do not (outer initializers aside).
    """

    def __init__(self, graph: Any, placed: Mapping[str, str], requested: str) -> None:
        self._placed = placed
        self._requested = requested
        self._verdicts: dict[str, list[tuple[bool, str]]] = {}
        self._analyse(graph, outer_initializers={})

    def verdict(self, name: str) -> tuple[bool, str] | None:
        """(is shape computation, reason) for ``name``; None when the graph does not show it
        unambiguously (a name the optimizer made, or one several subgraphs share and judge
        differently)."""
        for candidate in _original_names(name):
            found = self._verdicts.get(candidate)
            if found and all(v == found[0] for v in found):
                return found[0]
        return None

    def _analyse(self, graph: Any, outer_initializers: Mapping[str, int]) -> None:
        types = _value_types(graph)
        initializers = {**outer_initializers, **_initializer_sizes(graph)}
        # Value name -> what it is on the host: "shape" (shape computation produced it),
        # "input" (graph input or small initializer), "fallback" (a fallback node produced it);
        # absent: a device tensor or a large initializer.
        host: dict[str, str] = {"": "input"}  # "" is an omitted optional input
        host.update({v.name: "input" for v in graph.input if v.name not in initializers})
        host.update({n: "input" for n, size in initializers.items() if size <= SMALL_INITIALIZER})
        producers: dict[str, str] = {}
        for node in graph.node:
            for body in _subgraphs(node):
                self._analyse(body, initializers)
            is_shape, reason = self._judge(node, host, producers, types, initializers)
            device = self._placed.get(node.name)
            if device is not None and device != self._requested:
                self._verdicts.setdefault(node.name, []).append((is_shape, reason))
            kind = None
            if node.op_type in SHAPE_SOURCES:
                kind = "shape"
            elif device is None:  # folded into a constant, or fused away by the optimizer
                constant = node.op_type == "Constant" or all(host.get(i) for i in node.input)
                kind = "shape" if is_shape else "input" if constant else None
            elif device != self._requested:
                kind = "shape" if is_shape else "fallback"
            for output in node.output:
                producers[output] = node.name
                if kind is not None:
                    host[output] = kind

    @staticmethod
    def _judge(
        node: Any,
        host: Mapping[str, str],
        producers: Mapping[str, str],
        types: Mapping[str, int],
        initializers: Mapping[str, int],
    ) -> tuple[bool, str]:
        if node.op_type in SHAPE_SOURCES:
            return True, f"{node.op_type} reads only its input's shape"
        replayed = ShapeAnalysis._replay(node, host, producers, types, initializers)
        if replayed[0] or node.op_type not in SHAPE_OPS:
            return replayed
        # ONNX Runtime's partitioner also moves shape ops to the host from the other side (the
        # producers of a kernel's CPU inputs, such as Reshape's target shape): an index/shape
        # op whose every input and output is an integer or boolean tensor is shape arithmetic.
        values = [v for v in [*node.input, *node.output] if v]
        if values and all(types.get(v) in _SHAPE_TYPES for v in values):
            return True, (
                f"{node.op_type} on integer/boolean values only (shape arithmetic, which ONNX "
                "Runtime keeps on the host next to the kernels that read shapes there)"
            )
        return replayed

    @staticmethod
    def _replay(
        node: Any,
        host: Mapping[str, str],
        producers: Mapping[str, str],
        types: Mapping[str, int],
        initializers: Mapping[str, int],
    ) -> tuple[bool, str]:
        inputs = [*node.input, *_implicit_inputs(node)]
        shape_inputs = []
        for name in inputs:
            low = _LOW_PRECISION_FLOATS.get(types.get(name, 0))
            if low is not None:
                return False, f"input {name!r} is {low} (never kept on the host for shape math)"
            kind = host.get(name)
            if kind is None:
                what = (
                    f"an initializer of {initializers[name]} elements"
                    if name in initializers
                    else f"a device tensor from {producers[name]!r}"
                    if name in producers
                    else "a tensor from the enclosing graph"
                )
                return False, f"it computes on tensor data (input {name!r} is {what})"
            if kind == "fallback":
                return False, f"input {name!r} comes from fallback node {producers[name]!r}"
            if kind == "shape":
                shape_inputs.append(name)
        if not shape_inputs:
            return False, "none of its inputs is a shape value"
        return True, (
            f"it computes on shape values only ({', '.join(repr(n) for n in shape_inputs[:3])}); "
            f"ONNX Runtime keeps shape arithmetic on the host by design"
        )


def _original_names(name: str) -> Iterator[str]:
    """``name`` and what it was before the optimizer renamed a copy of it."""
    yield name
    stripped = _GENERATED_SUFFIX.sub("", _INLINED_PREFIX.sub("", name))
    if stripped != name:
        yield stripped


def _subgraphs(node: Any) -> Iterator[Any]:
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _implicit_inputs(node: Any) -> list[str]:
    """Values a control-flow node's bodies read from the enclosing graph."""
    found: list[str] = []
    for body in _subgraphs(node):
        defined = {v.name for v in body.input} | {t.name for t in body.initializer}
        for inner in body.node:
            found.extend(
                i for i in [*inner.input, *_implicit_inputs(inner)] if i and i not in defined
            )
            defined.update(inner.output)
    return list(dict.fromkeys(found))


def _value_types(graph: Any) -> dict[str, int]:
    types = {t.name: int(t.data_type) for t in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if value.type.HasField("tensor_type"):
            types[value.name] = int(value.type.tensor_type.elem_type)
    return types


def _initializer_sizes(graph: Any) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for tensor in graph.initializer:
        size = 1
        for dim in tensor.dims:
            size *= int(dim)
        sizes[tensor.name] = size
    return sizes


def classify(
    nodes: Iterable[PlacedNode],
    *,
    requested: str,
    analysis: ShapeAnalysis | None,
    elsewhere_reason: str,
    engine_shape_nodes: frozenset[str] = frozenset(),
    engine_shape_reason: str = "",
) -> list[Classified]:
    """Each node's placement class. ``elsewhere_reason`` says why an engine moves a node off
    ``requested`` when it is not shape computation (the engine's own words where it has any);
    without an ``analysis`` every such node is a fallback. ``engine_shape_nodes`` are the
    nodes the engine itself reported placing on the host as shape work (with
    ``engine_shape_reason``): its report wins over the analysis."""
    classified = []
    for node in nodes:
        if node.device == requested:
            classified.append(Classified(node, "requested"))
            continue
        if any(name in engine_shape_nodes for name in _original_names(node.name)):
            classified.append(
                Classified(
                    node, "host_shape", f"host-side shape computation: {engine_shape_reason}"
                )
            )
            continue
        if analysis is None:
            classified.append(Classified(node, "fallback", elsewhere_reason))
            continue
        verdict = analysis.verdict(node.name)
        if verdict is None:
            why = (
                "the model graph does not show it unambiguously (the engine's optimizer made "
                "it, or several subgraphs share its name), so it cannot be shown to be shape "
                "computation"
            )
            classified.append(
                Classified(node, "fallback", f"{elsewhere_reason}; {why}", shown=False)
            )
        elif verdict[0]:
            classified.append(
                Classified(node, "host_shape", f"host-side shape computation: {verdict[1]}")
            )
        else:
            classified.append(Classified(node, "fallback", f"{elsewhere_reason}: {verdict[1]}"))
    return classified


def explain_unshown(
    classified: Sequence[Classified],
    partitioned: ShapeAnalysis,
    *,
    origins: Mapping[str, str],
    elsewhere_reason: str,
) -> list[Classified]:
    """Judge again, on the graph the engine actually partitioned (``partitioned``: its own
    optimized graph), the nodes the model graph did not show. ``origins`` names, per node, what
    the engine made it from (``"inlined from Attention's ONNX function body"``). A node that graph shows as
    shape computation becomes ``host_shape``; one it shows computing on tensor data stays a
    fallback with that reason; one it does not show either stays as it was."""
    judged = []
    for c in classified:
        verdict = None if c.shown else partitioned.verdict(c.node.name)
        if verdict is None:
            judged.append(c)
            continue
        made = origins.get(c.node.name, "made by the engine while partitioning")
        if verdict[0]:
            reason = (
                f"host-side shape computation, {made} (shown by the engine's partitioned "
                f"graph): {verdict[1]}"
            )
            judged.append(Classified(c.node, "host_shape", reason))
        else:
            reason = f"{elsewhere_reason}: {made}; {verdict[1]}"
            judged.append(Classified(c.node, "fallback", reason))
    return judged


def record_placement(
    decisions: Decisions,
    classified: Sequence[Classified],
    *,
    requested: str,
    precision: str | None,
    fallback_recorded: bool = False,
) -> None:
    """Fill the record's nodes and apply the policy: fallbacks through the fallback rule
    (unless ``fallback_recorded``: a whole-model fallback already said so), host-side shape
    nodes per ``ExecutionPolicy.host_shape_compute``."""
    record = decisions.record
    host_shape_compute = decisions.policy.host_shape_compute
    record.nodes.extend(
        NodeRecord(
            name=c.node.name,
            op_type=c.node.op_type,
            requested=requested,
            chosen=c.node.device,
            kernel=c.node.kernel,
            precision=c.node.precision or precision,
            placement=c.placement,
            reason=c.reason,
        )
        for c in classified
    )
    host_shape = [c.node for c in classified if c.placement == "host_shape"]
    if host_shape and host_shape_compute == "forbid":
        raise HostShapeComputeError(
            f"{len(host_shape)} node(s) of shape computation run on the host instead of "
            f"{requested}: {name_nodes(host_shape)}. ExecutionPolicy(host_shape_compute="
            f"'forbid') does not allow that; set host_shape_compute='allow' (the default) to run "
            f"and record them, or make the shapes static (input_shapes, static_shape=True) so the "
            f"engine folds them into constants"
        )
    if host_shape:
        devices = ", ".join(sorted({n.device for n in host_shape}))
        record.notes.append(
            f"{len(host_shape)} node(s) of host-side shape computation run on {devices} by "
            f"design: {name_nodes(host_shape)} (ExecutionPolicy.host_shape_compute="
            f"'{host_shape_compute}')"
        )
    fallen = [c for c in classified if c.placement == "fallback"]
    if fallen and not fallback_recorded:
        nodes = [c.node for c in fallen]
        reasons = list(dict.fromkeys(c.reason for c in fallen))
        decisions.fallback(
            what=f"{len(fallen)} node(s) {name_nodes(nodes)}",
            requested=requested,
            chosen=", ".join(sorted({n.device for n in nodes})),
            reason=reasons[0]
            + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""),
        )
