"""Where OpenVINO runs each op (its runtime graph), and whether an int8 model runs in int8."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.placement import PlacedNode, classify, record_placement
from xpuruntime.inference.precision import precision_given
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.npu.openvino_devices import OpenVINOTarget
    from xpuruntime.runtime.decisions import Decisions

#: Runtime-graph layers that hold data rather than execute: not nodes of the record, and
#: not evidence of the precision an op runs in (a Const in i8 is a weight stored in i8).
_DATA_LAYERS = frozenset({"Input", "Output", "Const"})
_INT8_PRECISIONS = {"i8", "u8"}
_FLOAT_NAMES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}


def runtime_precision(rt_info: Any) -> str | None:
    """The element type a runtime-graph op executes in (its ``runtimePrecision`` runtime
    info: ``f32``, ``i8`` ...), as the plugin reports it; None when it reports none."""
    return str(rt_info["runtimePrecision"].astype(str)) if "runtimePrecision" in rt_info else None


def _text(info: Any, key: str, default: str | None) -> str | None:
    return str(info[key].astype(str)) if key in info else default


@dataclass(frozen=True)
class RuntimeGraph:
    """What the runtime graph says beyond its executing ops (those go to record.nodes)."""

    integer_constants: int  # Const layers kept in i8/u8: weights stored so, not executed


def record_nodes(
    compiled: Any, executed: Sequence[str], target: OpenVINOTarget, decisions: Decisions
) -> RuntimeGraph | None:
    """Runtime-graph ops into record.nodes; None when the device exposes no runtime graph."""
    record = decisions.record
    try:
        runtime_model = compiled.get_runtime_model()
    except RuntimeError as exc:  # AUTO and some NPU drivers expose no runtime graph
        record.notes.append(f"OpenVINO gave no runtime graph for node records: {exc}")
        return None
    device = ",".join(executed)
    required = target.required
    # OpenVINO runs a compiled model on its EXECUTION_DEVICES as a whole: every layer is
    # where the model is, and off the required device only through the device fallback
    # that the settings read-back has already recorded.
    moved = required is not None and any(
        d.split(".")[0] != required.split(".")[0] for d in executed
    )
    requested = required if moved and required is not None else device
    nodes = []
    integer_constants = 0
    for op in runtime_model.get_ordered_ops():
        info = op.get_rt_info()
        layer = _text(info, "layerType", None) or op.get_type_name()
        if layer in _DATA_LAYERS:
            if layer == "Const" and runtime_precision(info) in _INT8_PRECISIONS:
                integer_constants += 1
            continue
        nodes.append(
            PlacedNode(
                name=_text(info, "originalLayersNames", None) or op.get_friendly_name(),
                op_type=layer,
                device=device,
                kernel=_text(info, "primitiveType", None),
                precision=runtime_precision(info),
            )
        )
    classified = classify(
        nodes,
        requested=requested,
        analysis=None,
        elsewhere_reason=f"{target.compile_device} reports EXECUTION_DEVICES={executed}",
    )
    record_placement(
        decisions,
        classified,
        requested=requested,
        precision=None,
        fallback_recorded=True,
    )
    return RuntimeGraph(integer_constants)


def check_int8(target: OpenVINOTarget, decisions: Decisions, graph: RuntimeGraph | None) -> None:
    """int8 holds only if the runtime graph runs some op in i8/u8 (a CPU may emulate a
    FakeQuantize model in f32 instead, which is then a precision fallback). Only executing
    ops count: a weight the plugin stores in i8 and dequantizes into a float kernel does not."""
    record = decisions.record
    given = precision_given(decisions)
    requested = record.precision.requested if record.precision else ("int8" if given else None)
    if graph is None:
        record.precision = Choice(
            requested, "int8", f"{target.compile_device} shows no runtime graph to verify it"
        )
        return
    integer = [n for n in record.nodes if n.precision in _INT8_PRECISIONS]
    ran = {n.precision for n in record.nodes if n.precision} - _INT8_PRECISIONS
    floats = sorted(_FLOAT_NAMES.get(p, p) for p in ran)
    if integer:
        others = f"; the other op(s) in {'/'.join(floats)}" if floats else ""
        record.precision = Choice(
            requested, "int8", f"{len(integer)} runtime op(s) run in i8/u8{others}"
        )
        return
    chosen = "/".join(floats) or "float"
    stored = (
        f" ({graph.integer_constants} of its constants stay in i8/u8: weights those kernels "
        "dequantize)"
        if graph.integer_constants
        else ""
    )
    reason = (
        f"{target.compile_device} compiled the quantized model's FakeQuantize/QDQ ops into "
        f"{chosen} kernels{stored}: no op runs in i8/u8"
    )
    if requested is not None:  # asked for: not getting it is a fallback; unasked: a fact
        decisions.fallback(what="precision", requested="int8", chosen=chosen, reason=reason)
    record.precision = Choice(requested, chosen, reason)
