"""ExecutionPolicy settings as OpenVINO compile properties, and read back from the compiled
model: each one recorded as honoured or not (with the reason)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.settings import add_setting
from xpuruntime.npu import openvino_backend
from xpuruntime.npu.options import engine_options
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.npu.openvino_devices import OpenVINOTarget
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.decisions import Decisions

#: ExecutionPolicy.precision -> (OPTIMIZATION_CAPABILITIES entry, INFERENCE_PRECISION_HINT).
#: int8 comes from a quantized model, not a hint; tf32 and fp8 have no OpenVINO counterpart.
PRECISION_HINTS = {"fp32": ("FP32", "f32"), "fp16": ("FP16", "f16"), "bf16": ("BF16", "bf16")}
_HINT_TO_PRECISION = {hint: name for name, (_, hint) in PRECISION_HINTS.items()}
#: Float precisions a model can be stored in; fp64 has no hint (no device lists an FP64
#: capability), so an fp64 model gets the f32 one.
_FLOATS = frozenset({*PRECISION_HINTS, "fp64"})
_OPTION_KEYS = ("num_streams",)


def precision_of(hint: Any) -> str:
    """An INFERENCE_PRECISION_HINT value (an OpenVINO element type) as a policy precision."""
    name = hint.to_string() if hasattr(hint, "to_string") else str(hint)
    return _HINT_TO_PRECISION.get(name, name)


def float_precisions(target: OpenVINOTarget) -> tuple[str, ...]:
    """Float precisions every candidate device lists in OPTIMIZATION_CAPABILITIES: those
    OpenVINO computes an fp32 model in when INFERENCE_PRECISION_HINT asks for them."""
    listed = [openvino_backend.capabilities(kind) for kind in target.kinds]
    return tuple(
        name
        for name, (capability, _) in PRECISION_HINTS.items()
        if all(capability in c for c in listed)
    )


def precision_hint(precision: str, listed: Collection[str]) -> str | None:
    """The INFERENCE_PRECISION_HINT for a model the kit runs in ``precision`` on a device whose
    OPTIMIZATION_CAPABILITIES are ``listed``: that precision where the device lists it; f32
    for a float precision it does not list, fp64 included (f32 is the closest to it there
    is, while the plugin's own default depends on the CPU: bf16 where it has AVX512_BF16 or
    AMX, below an fp16 model's precision); none for int8, which the quantized model
    carries. The compiled model's read-back says what was honoured (:func:`read_back`)."""
    if precision not in _FLOATS:
        return None
    hint = PRECISION_HINTS.get(precision)
    if hint is not None and hint[0] in listed:
        return hint[1]
    return PRECISION_HINTS["fp32"][1] if PRECISION_HINTS["fp32"][0] in listed else None


def properties(
    policy: ExecutionPolicy, decisions: Decisions, target: OpenVINOTarget, precision: str
) -> dict[str, Any]:
    """compile_model properties for ``target`` (AUTO gets per-device ones in
    DEVICE_PROPERTIES); the precision hint is the one the kit's precision rule chose."""
    options, raw = engine_options(
        policy,
        "openvino",
        _OPTION_KEYS,
        str.isupper,
        "OpenVINO properties in upper case (ENABLE_CPU_PINNING, ...), passed as is",
    )
    record = decisions.record
    per_device: dict[str, dict[str, Any]] = {}
    for kind in target.kinds:
        device = per_device.setdefault(kind, {})
        hint = precision_hint(precision, openvino_backend.capabilities(kind))
        if hint is not None:
            device["INFERENCE_PRECISION_HINT"] = hint
        if policy.num_threads is not None:
            device["INFERENCE_NUM_THREADS"] = policy.num_threads
    props: dict[str, Any] = {"PERFORMANCE_HINT": policy.performance_hint.upper()}
    if "num_streams" in options:
        props["NUM_STREAMS"] = options["num_streams"]
    if policy.profiling:
        props["PERF_COUNT"] = True
        add_setting(record, "profiling", True, "PERF_COUNT=True", True, "per-op counters")
    _unmapped(policy, decisions)
    for key, value in raw.items():
        add_setting(record, f"engine_options.openvino.{key}", value, value, True, "passed as is")
    if target.compile_device.startswith("AUTO"):
        if any(per_device.values()):
            props["DEVICE_PROPERTIES"] = {k: v for k, v in per_device.items() if v}
    else:
        props.update(per_device.get(target.compile_device.split(".")[0], {}))
    return {**props, **raw}


def _unmapped(policy: ExecutionPolicy, decisions: Decisions) -> None:
    """Settings OpenVINO has no switch for, recorded as not honoured with the reason."""
    record = decisions.record
    level = policy.graph_optimization
    add_setting(
        record,
        "graph_optimization",
        level,
        "all" if level == "all" else None,
        level == "all",
        "OpenVINO's plugins always run their full transformation pipeline; there is no "
        "level to choose",
    )
    add_setting(
        record,
        "memory.pool",
        policy.memory.pool,
        None,
        False,
        "OpenVINO has no memory-pool switch: its plugins manage their own memory",
    )
    if policy.memory.limit_bytes is not None:
        add_setting(
            record,
            "memory.limit_bytes",
            policy.memory.limit_bytes,
            None,
            False,
            "OpenVINO has no memory limit option",
        )
    if policy.deterministic:
        add_setting(record, "deterministic", True, None, False, "OpenVINO has no such switch")


def read_back(
    compiled: Any,
    props: Mapping[str, Any],
    *,
    policy: ExecutionPolicy,
    decisions: Decisions,
    target: OpenVINOTarget,
    precision: str,
) -> list[str]:
    """What the compiled model runs with, recorded; returns its EXECUTION_DEVICES."""
    record = decisions.record
    supported = compiled.get_property("SUPPORTED_PROPERTIES")
    executed = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]

    def read(name: str) -> Any:
        return compiled.get_property(name) if name in supported else None

    hint = str(read("PERFORMANCE_HINT"))
    add_setting(
        record, "performance_hint", policy.performance_hint, hint, hint == props["PERFORMANCE_HINT"]
    )
    if "NUM_STREAMS" in props:
        streams = read("NUM_STREAMS")
        add_setting(
            record,
            "engine_options.openvino.num_streams",
            props["NUM_STREAMS"],
            streams,
            str(streams) == str(props["NUM_STREAMS"]),
        )
    if policy.num_threads is not None:
        threads = read("INFERENCE_NUM_THREADS")
        add_setting(
            record,
            "num_threads",
            policy.num_threads,
            threads,
            threads == policy.num_threads,
            "" if threads is not None else f"{target.compile_device} does not report it",
        )
    _check_precision(
        read("INFERENCE_PRECISION_HINT"), props, executed, decisions, target, precision
    )
    _check_devices(executed, decisions, target)
    return executed


def _hints_set(props: Mapping[str, Any], executed: list[str]) -> dict[str, str]:
    """INFERENCE_PRECISION_HINT as set for each executing device (AUTO: its
    DEVICE_PROPERTIES); a device given none is left out."""
    per_device = props.get("DEVICE_PROPERTIES")
    if not isinstance(per_device, Mapping):
        hint = props.get("INFERENCE_PRECISION_HINT")
        return {} if hint is None else {d: str(hint) for d in executed}
    hints = {
        d: per_device.get(d.split(".")[0], {}).get("INFERENCE_PRECISION_HINT") for d in executed
    }
    return {d: str(h) for d, h in hints.items() if h is not None}


def _check_precision(
    hint: Any,
    props: Mapping[str, Any],
    executed: list[str],
    decisions: Decisions,
    target: OpenVINOTarget,
    precision: str,
) -> None:
    """The float precision the compiled model reports against the kit's choice."""
    record = decisions.record
    requested = record.precision.requested if record.precision else decisions.policy.precision
    if precision not in _FLOATS:
        return  # int8: decided from the runtime graph (openvino_placement.check_int8)
    listed = {k: list(openvino_backend.capabilities(k)) for k in target.kinds}
    asked = _hints_set(props, executed)
    silent = f"{target.compile_device} does not report INFERENCE_PRECISION_HINT back"
    if hint is None:  # AUTO does not report its devices' hints: what was set, said so
        ran_on = sorted({precision_of(h) for h in asked.values()})
        if ran_on == [precision] and len(asked) == len(executed):
            record.precision = Choice(requested, precision, f"set for {executed}; {silent}")
            return
        reason = (
            f"INFERENCE_PRECISION_HINT set for the executing devices: {asked or 'none'}; "
            f"{silent} (OPTIMIZATION_CAPABILITIES: {listed})"
        )
        if len(asked) < len(executed):  # a device with none computes in its plugin's default
            record.precision = Choice(requested, "unknown", reason)
            return
        chosen = "/".join(ran_on)
        decisions.fallback(what="precision", requested=precision, chosen=chosen, reason=reason)
        record.precision = Choice(requested, chosen, reason)
        return
    ran = precision_of(hint)
    # The row answers the user's request (a precision fallback the kit already recorded
    # is not honoured); a fallback is added only where OpenVINO strays from the kit's choice.
    honoured = ran == (requested if requested is not None else precision)
    add_setting(record, "precision", requested, ran, honoured, "INFERENCE_PRECISION_HINT")
    if ran == precision:
        if record.precision is None:  # an OpenVINO IR model: the kit leaves it to the engine
            record.precision = Choice(requested, ran, "INFERENCE_PRECISION_HINT read back")
        return
    set_to = sorted({precision_of(h) for h in asked.values()})
    why = f" (it computes in no {precision})" if set_to and set_to != [precision] else ""
    reason = (
        f"{target.compile_device} compiled for {ran} (INFERENCE_PRECISION_HINT "
        f"{'/'.join(set_to) + ' set' + why if set_to else 'not set'}, {ran} read back; "
        f"OPTIMIZATION_CAPABILITIES: {listed})"
    )
    decisions.fallback(what="precision", requested=precision, chosen=ran, reason=reason)
    record.precision = Choice(requested, ran, reason)


def _check_devices(executed: list[str], decisions: Decisions, target: OpenVINOTarget) -> None:
    record = decisions.record
    required = target.required
    chosen = ",".join(executed)
    moved = required is not None and any(
        d.split(".")[0] != required.split(".")[0] for d in executed
    )
    # AUTO starts on CPU while the NPU/GPU compiles, or picks another device outright.
    if moved and required is not None and not any(f.what == "device" for f in record.fallbacks):
        decisions.fallback(
            what="device",
            requested=required,
            chosen=chosen,
            reason=f"{target.compile_device} reports EXECUTION_DEVICES={executed}",
        )
    record.device = Choice(
        target.requested, chosen, f"EXECUTION_DEVICES of {target.compile_device}"
    )
