"""ExecutionPolicy settings as QNN EP provider options and ONNX Runtime session options,
each one recorded (honoured, or not with the reason)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.settings import add_setting
from xpuruntime.npu.errors import StaticShapeRequiredError
from xpuruntime.npu.options import engine_options
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.record import Choice

if TYPE_CHECKING:
    from xpuruntime.npu.qnn_backend import Backend
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.decisions import Decisions
    from xpuruntime.runtime.engines import TensorInfo

_OPTION_KEYS = ("backend_type", "htp_performance_mode")
# QNN EP provider options (onnxruntime-qnn 2.x) passed through engine_options["qnn"] as is.
PROVIDER_OPTIONS = frozenset(
    {
        "soc_model", "htp_arch", "device_id", "vtcm_mb", "rpc_control_latency",
        "profiling_level", "profiling_file_path", "qnn_context_priority",
        "htp_graph_finalization_optimization_mode", "enable_htp_fp16_precision",
        "htp_bf16_enable", "enable_htp_spill_fill_buffer", "offload_graph_io_quantization",
        "enable_htp_shared_memory_allocator", "extended_udma",
        "enable_vtcm_backup_buffer_sharing", "htp_share_resource_optimization", "op_packages",
        "enable_block_quant_weight_optimization", "dump_json_qnn_graph", "json_qnn_graph_dir",
        "enable_framework_op_trace", "framework_op_trace_dir", "skip_qnn_version_check",
        "disable_file_mapped_weights", "num_graph_prepare_threads",
    }
)  # fmt: skip
BACKENDS: tuple[Backend, ...] = ("htp", "gpu", "cpu")
_PERF_MODES = (
    "burst", "balanced", "default", "high_performance", "high_power_saver", "low_balanced",
    "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance",
)  # fmt: skip
_PERF_MODE_FOR_HINT = {"latency": "burst", "throughput": "sustained_high_performance"}
_GRAPH_OPT = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


@dataclass
class QnnOptions:
    """What a QNN session is made with: provider options and what the session options need."""

    provider: dict[str, str] = field(default_factory=dict)
    graph_optimization: str = "ORT_ENABLE_ALL"
    num_threads: int | None = None
    deterministic: bool = False
    free_dims: dict[str, int] = field(default_factory=dict)


def split_options(policy: ExecutionPolicy) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options the engine maps, provider options passed as is) of engine_options['qnn']."""
    return engine_options(
        policy,
        "qnn",
        _OPTION_KEYS,
        PROVIDER_OPTIONS.__contains__,
        f"QNN provider options {sorted(PROVIDER_OPTIONS)}",
    )


def choose_backend(policy: ExecutionPolicy, kind: str) -> Backend:
    """The QNN backend: engine_options['qnn']['backend_type'], else the device kind's own."""
    requested = split_options(policy)[0].get("backend_type")
    if requested is not None and requested not in BACKENDS:
        raise PolicyError(
            f"engine_options['qnn']['backend_type'] = {requested!r}; valid: {list(BACKENDS)}"
        )
    default: Backend = {"npu": "htp", "gpu": "gpu", "cpu": "htp"}[kind]  # type: ignore[assignment]
    chosen: Backend = requested or default
    return chosen


def _soc(policy: ExecutionPolicy) -> str:
    return str(split_options(policy)[1].get("soc_model", "0"))


def htp_precisions(policy: ExecutionPolicy) -> tuple[str, ...]:
    """Float precisions the HTP backend computes an fp32 model in here: fp32, fp16 with the
    SoC named (onnxruntime-qnn enables HTP fp16 only then), bf16 on SoC >= 88."""
    soc = _soc(policy)
    found = ["fp32"]
    if soc != "0":
        found.append("fp16")
    if soc.isdigit() and int(soc) >= 88:
        found.append("bf16")
    return tuple(found)


def provider_options(
    policy: ExecutionPolicy,
    decisions: Decisions,
    *,
    backend: Backend,
    library: str,
    precision: str,
    emulated: bool,
) -> dict[str, str]:
    """The QNN EP provider options, recorded."""
    record = decisions.record
    own, raw = split_options(policy)
    note = "HTP simulator on x86_64" if emulated else ""
    add_setting(
        record, "engine_options.qnn.backend_type", own.get("backend_type"), backend, True, note
    )
    options: dict[str, str] = {"backend_path": library}
    if backend == "htp":
        mode = own.get("htp_performance_mode") or _PERF_MODE_FOR_HINT[policy.performance_hint]
        if mode not in _PERF_MODES:
            raise PolicyError(
                f"engine_options['qnn']['htp_performance_mode'] = {mode!r}; "
                f"valid: {list(_PERF_MODES)}"
            )
        options["htp_performance_mode"] = mode
        add_setting(
            record,
            "performance_hint",
            policy.performance_hint,
            f"htp_performance_mode={mode}",
            True,
        )
        options.update(_htp_precision(precision, decisions))
    else:
        add_setting(
            record, "performance_hint", policy.performance_hint, None, False,
            f"the QNN {backend} backend has no performance mode",
        )  # fmt: skip
    passed = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    for key, value in passed.items():
        add_setting(record, f"engine_options.qnn.{key}", raw[key], value, True, "passed as is")
    return {**options, **passed}


def _htp_precision(precision: str, decisions: Decisions) -> dict[str, str]:
    """The HTP precision switch for the precision the kit's rule chose."""
    record = decisions.record
    requested = record.precision.requested if record.precision else precision
    if precision in ("fp32", "fp16"):
        flag = "1" if precision == "fp16" else "0"
        add_setting(record, "precision", requested, f"enable_htp_fp16_precision={flag}", True)
        return {"enable_htp_fp16_precision": flag}
    if precision == "bf16":
        add_setting(record, "precision", requested, "htp_bf16_enable=1", True)
        return {"htp_bf16_enable": "1"}
    honoured = requested in (None, precision)
    add_setting(
        record, "precision", requested, precision, honoured, "HTP runs the model's Q/DQ precision"
    )
    if record.precision is None:
        record.precision = Choice(requested, precision, "quantized (QDQ) model")
    return {}


def session_settings(
    policy: ExecutionPolicy,
    decisions: Decisions,
    inputs: Sequence[TensorInfo],
    shapes: Mapping[str, Sequence[int]],
) -> QnnOptions:
    """Graph optimization, threads, profiling, determinism and pinned shapes, recorded."""
    record = decisions.record
    level = _GRAPH_OPT[policy.graph_optimization]
    add_setting(record, "graph_optimization", policy.graph_optimization, level, True)
    if policy.num_threads is not None:
        add_setting(
            record, "num_threads", policy.num_threads, policy.num_threads, True,
            "threads of the CPU EP part; QNN manages its own",
        )  # fmt: skip
    if policy.profiling and "profiling_level" not in split_options(policy)[1]:
        add_setting(
            record, "profiling", True, None, False,
            "QNN profiles to CSV: set engine_options['qnn'] profiling_level and profiling_file_path",
        )  # fmt: skip
    if policy.deterministic:
        add_setting(record, "deterministic", True, True, True, "ONNX Runtime deterministic compute")
    for name in ("pool", "limit_bytes"):
        value = getattr(policy.memory, name)
        if name == "pool" or value is not None:
            add_setting(
                record, f"memory.{name}", value, None, False,
                "the QNN EP manages HTP memory itself; ONNX Runtime's CPU arena is left as is",
            )  # fmt: skip
    pinned = _pinned_dims(inputs, shapes)
    add_setting(
        record, "input_shapes", policy.input_shapes, {k: list(v) for k, v in shapes.items()}, True,
        f"free dimensions pinned: {pinned}" if pinned else "model already static",
    )  # fmt: skip
    return QnnOptions(
        graph_optimization=level,
        num_threads=policy.num_threads,
        deterministic=policy.deterministic,
        free_dims=pinned,
    )


def _pinned_dims(
    inputs: Sequence[TensorInfo], shapes: Mapping[str, Sequence[int]]
) -> dict[str, int]:
    """Symbolic dims pinned with free-dimension overrides (QNN compiles one shape)."""
    pinned: dict[str, int] = {}
    for info in inputs:
        for axis, (dim, value) in enumerate(zip(info.shape, shapes[info.name], strict=True)):
            if isinstance(dim, int):
                continue
            if dim is None:
                raise StaticShapeRequiredError(
                    f"input {info.name!r} axis {axis} is dynamic without a name, so ONNX Runtime "
                    f"cannot pin it; fix it in the model, for example: python -m "
                    f"onnxruntime.tools.make_dynamic_shape_fixed --input_name {info.name} "
                    f"--input_shape {','.join(map(str, shapes[info.name]))} in.onnx out.onnx"
                )
            if pinned.setdefault(dim, value) != value:
                raise PolicyError(
                    f"input_shapes give dimension {dim!r} two values ({pinned[dim]} and {value}); "
                    f"every input sharing {dim!r} must use one size"
                )
    return pinned


def session_options(ort: Any, options: QnnOptions, ep_device: Any) -> Any:
    """A fresh SessionOptions for ``options`` bound to the QNN EP device (one per session)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3  # QNN's info/warning chatter goes to stderr otherwise
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, options.graph_optimization)
    if options.num_threads is not None:
        so.intra_op_num_threads = options.num_threads
    if options.deterministic:
        so.use_deterministic_compute = True
    for name, value in options.free_dims.items():
        so.add_free_dimension_override_by_name(name, value)
    so.add_provider_for_devices([ep_device], options.provider)
    return so
