"""Where OpenVINO runs each op (its runtime graph), and whether an int8 model runs in int8."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.placement import PlacedNode, classify, record_placement
from xpuruntime.inference.precision import precision_given
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.npu.openvino_devices import OpenVINOTarget
    from xpuruntime.runtime.decisions import Decisions

_SKIPPED_LAYERS = {"Input", "Output", "Const"}
_INT8_PRECISIONS = {"i8", "u8"}
_FLOAT_NAMES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}


def runtime_precision(rt_info: Any) -> str | None:
    """The element type a runtime-graph op executes in (its ``runtimePrecision`` runtime
    info: ``f32``, ``i8`` ...), as the plugin reports it; None when it reports none."""
    return str(rt_info["runtimePrecision"].astype(str)) if "runtimePrecision" in rt_info else None


def _text(info: Any, key: str, default: str | None) -> str | None:
    return str(info[key].astype(str)) if key in info else default


def record_nodes(
    compiled: Any, executed: Sequence[str], target: OpenVINOTarget, decisions: Decisions
) -> bool:
    """Runtime-graph ops into record.nodes; False when the device exposes no runtime graph."""
    record = decisions.record
    try:
        runtime_model = compiled.get_runtime_model()
    except RuntimeError as exc:  # AUTO and some NPU drivers expose no runtime graph
        record.notes.append(f"OpenVINO gave no runtime graph for node records: {exc}")
        return False
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
    for op in runtime_model.get_ordered_ops():
        info = op.get_rt_info()
        layer = _text(info, "layerType", None) or op.get_type_name()
        if layer in _SKIPPED_LAYERS:
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
    return True


def check_int8(target: OpenVINOTarget, decisions: Decisions, have_nodes: bool) -> None:
    """int8 holds only if the runtime graph runs some op in i8/u8 (a CPU may emulate a
    FakeQuantize model in f32 instead, which is then a precision fallback)."""
    record = decisions.record
    given = precision_given(decisions)
    requested = record.precision.requested if record.precision else ("int8" if given else None)
    if not have_nodes:
        record.precision = Choice(
            requested, "int8", f"{target.compile_device} shows no runtime graph to verify it"
        )
        return
    integer = [n for n in record.nodes if n.precision in _INT8_PRECISIONS]
    if integer:
        record.precision = Choice(requested, "int8", f"{len(integer)} runtime op(s) run in i8/u8")
        return
    ran = sorted({_FLOAT_NAMES.get(n.precision, n.precision) for n in record.nodes if n.precision})
    chosen = "/".join(ran) or "float"
    reason = (
        f"{target.compile_device} compiled the quantized model's FakeQuantize/QDQ ops into "
        f"{chosen} kernels: no op runs in i8/u8"
    )
    if requested is not None:  # asked for: not getting it is a fallback; unasked: a fact
        decisions.fallback(what="precision", requested="int8", chosen=chosen, reason=reason)
    record.precision = Choice(requested, chosen, reason)
