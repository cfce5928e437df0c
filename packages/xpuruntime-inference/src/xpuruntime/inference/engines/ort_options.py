"""ExecutionPolicy -> ONNX Runtime SessionOptions and provider options.

Every policy field that has an ONNX Runtime counterpart is mapped here, and each mapping is
written to ``record.settings`` with whether ONNX Runtime honours it on the chosen execution
provider. Fields that ONNX Runtime has no knob for are recorded as not honoured, with why.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.kit.provider_assignment import RECORD_ASSIGNMENT, can_report_assignment
from xpuruntime.inference.settings import add_setting
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.record import ExecutionRecord

if TYPE_CHECKING:
    import onnxruntime as ort

    from xpuruntime.policies import ExecutionPolicy

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"

_OPT_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

# CUDA EP provider options users may pass through engine_options["onnxruntime"].
CUDA_PROVIDER_OPTIONS = frozenset(
    {
        "arena_extend_strategy",
        "cudnn_conv_algo_search",
        "cudnn_conv_use_max_workspace",
        "cudnn_conv1d_pad_to_nc1d",
        "do_copy_in_default_stream",
        "enable_cuda_graph",
        "enable_skip_layer_norm_strict_mode",
        "gpu_mem_limit",
        "prefer_nhwc",
        "sdpa_kernel",
        "tunable_op_enable",
        "tunable_op_tuning_enable",
        "use_tf32",
        "fuse_conv_bias",
    }
)


@dataclass
class OrtConfig:
    """What an ONNX Runtime session is created with."""

    options: ort.SessionOptions
    providers: list[tuple[str, dict[str, str]]]
    profile_dir: str | None = None
    keep_alive: list[Any] = field(default_factory=list)


def build_config(
    policy: ExecutionPolicy,
    *,
    provider: str,
    device_index: int,
    record: ExecutionRecord,
    engine_options: Mapping[str, Any],
    kernel_options: Mapping[str, Any],
    free_dims: Mapping[str, int],
    stream_handle: int | None,
    strict_fallback: bool,
) -> OrtConfig:
    """SessionOptions and providers for ``provider`` under ``policy``; fills ``record.settings``.

    ``strict_fallback``: a fallback raises (``Decisions.fallback_raises``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    on_cuda = provider == CUDA_EP
    cuda: dict[str, Any] = {"device_id": device_index} if on_cuda else {}

    apply_log_level(ort, so, policy, record)
    level = _OPT_LEVELS[policy.graph_optimization]
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    add_setting(record, "graph_optimization", policy.graph_optimization, level, True)

    if policy.num_threads is not None:
        so.intra_op_num_threads = policy.num_threads
        add_setting(
            record,
            "num_threads",
            policy.num_threads,
            f"intra_op_num_threads={policy.num_threads}",
            True,
        )

    parallel = policy.performance_hint == "throughput"
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    add_setting(
        record,
        "performance_hint",
        policy.performance_hint,
        "execution_mode=ORT_PARALLEL" if parallel else "execution_mode=ORT_SEQUENTIAL",
        True,
        "independent graph branches run in parallel" if parallel else "nodes run in order",
    )

    so.use_deterministic_compute = policy.deterministic
    add_setting(
        record,
        "deterministic",
        policy.deterministic,
        f"use_deterministic_compute={policy.deterministic}",
        True,
    )
    if on_cuda:
        # EXHAUSTIVE benchmarks cuDNN algorithms per shape and may pick differently per run.
        cuda["cudnn_conv_algo_search"] = "DEFAULT" if policy.deterministic else "EXHAUSTIVE"
        add_setting(
            record,
            "cudnn_conv_algo_search",
            "deterministic" if policy.deterministic else "fastest",
            cuda["cudnn_conv_algo_search"],
            True,
        )
        cuda["use_tf32"] = 1 if policy.precision == "tf32" else 0
        add_setting(
            record,
            "precision.tf32",
            policy.precision,
            f"use_tf32={cuda['use_tf32']}",
            True,
            "TF32 tensor-core math only when precision='tf32'",
        )

    so.enable_cpu_mem_arena = policy.memory.pool
    add_setting(
        record,
        "memory.pool",
        policy.memory.pool,
        f"enable_cpu_mem_arena={policy.memory.pool}",
        True,
    )
    if policy.memory.limit_bytes is not None:
        if on_cuda:
            cuda["gpu_mem_limit"] = policy.memory.limit_bytes
            add_setting(
                record,
                "memory.limit_bytes",
                policy.memory.limit_bytes,
                f"gpu_mem_limit={policy.memory.limit_bytes}",
                True,
            )
        else:
            add_setting(
                record,
                "memory.limit_bytes",
                policy.memory.limit_bytes,
                None,
                False,
                "the CPU execution provider has no memory limit option",
            )

    if on_cuda:
        cuda["enable_cuda_graph"] = int(policy.cuda_graphs)
        add_setting(
            record,
            "cuda_graphs",
            policy.cuda_graphs,
            f"enable_cuda_graph={int(policy.cuda_graphs)}",
            True,
            "replays need inputs bound at fixed device addresses (I/O binding)",
        )
    elif policy.cuda_graphs:
        add_setting(record, "cuda_graphs", True, None, False, f"{provider} has no CUDA graphs")

    if on_cuda and stream_handle is not None:
        cuda["has_user_compute_stream"] = 1
        cuda["user_compute_stream"] = str(stream_handle)
        add_setting(
            record,
            "compute_stream",
            "xpuruntime core stream",
            f"user_compute_stream={stream_handle:#x}",
            True,
        )

    for name, value in free_dims.items():
        so.add_free_dimension_override_by_name(name, int(value))
    if free_dims:
        add_setting(
            record,
            "input_shapes",
            dict(free_dims),
            {k: int(v) for k, v in free_dims.items()},
            True,
            "symbolic dimensions fixed with add_free_dimension_override_by_name",
        )

    profile_dir = None
    if policy.profiling:
        profile_dir = tempfile.mkdtemp(prefix="xpuruntime-ort-profile-")
        so.enable_profiling = True
        so.profile_file_prefix = f"{profile_dir}/onnxruntime"
        add_setting(record, "profiling", True, "enable_profiling=True", True)

    # Node placement: recorded always and checked from the assignment (kit.provider_assignment), which
    # tells host-side shape computation from fallbacks. ONNX Runtime's own
    # session.disable_cpu_ep_fallback cannot tell them apart (it refuses the CPU-preferred
    # shape nodes every GPU model has), so it is used only where ONNX Runtime cannot report
    # the assignment and the policy forbids both kinds anyway.
    so.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    strict_placement = (
        provider != CPU_EP
        and strict_fallback
        and policy.host_shape_compute == "forbid"
        and not can_report_assignment(ort)
    )
    if strict_placement:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        add_setting(
            record,
            "fallback",
            "error",
            "session.disable_cpu_ep_fallback=1",
            True,
            f"onnxruntime {ort.__version__} reports no node placement: ONNX Runtime refuses "
            f"to place any node on the CPU execution provider",
        )

    if on_cuda:
        cuda.update(kernel_options)  # recorded by the kernel policy mapping
    _apply_engine_options(record, so, cuda, engine_options, on_cuda)

    providers: list[tuple[str, dict[str, str]]] = []
    if on_cuda:
        providers.append((CUDA_EP, {k: str(v) for k, v in cuda.items()}))
    # ONNX Runtime rejects an explicit CPU provider next to disable_cpu_ep_fallback (seen with
    # 1.31 on an H200): under strict placement the CPU provider is simply not offered.
    if not strict_placement:
        providers.append((CPU_EP, {}))
    return OrtConfig(so, providers, profile_dir)


#: ExecutionPolicy.engine_log_level -> ONNX Runtime severity (0 verbose ... 3 error).
ORT_SEVERITIES = {"verbose": 0, "info": 1, "warning": 2, "error": 3}


def apply_log_level(
    ort: Any, so: ort.SessionOptions, policy: ExecutionPolicy, record: ExecutionRecord
) -> None:
    """ONNX Runtime emits messages at or above the policy's level (session and default
    logger; the default logger is process-wide, so the latest session's level holds)."""
    severity = ORT_SEVERITIES[policy.engine_log_level]
    so.log_severity_level = severity
    ort.set_default_logger_severity(severity)
    add_setting(
        record,
        "engine_log_level",
        policy.engine_log_level,
        f"log_severity_level={severity}",
        True,
        "messages go to the Python logger xpuruntime.engine.onnxruntime",
    )


def _apply_engine_options(
    record: ExecutionRecord,
    so: ort.SessionOptions,
    cuda: dict[str, Any],
    extra: Mapping[str, Any],
    on_cuda: bool,
) -> None:
    """``engine_options["onnxruntime"]``: session config keys and CUDA provider options."""
    for key, value in extra.items():
        name = f"engine_options.onnxruntime.{key}"
        if key.startswith(("session.", "optimization.", "mlas.", "ep.")):
            so.add_session_config_entry(key, str(value))
            add_setting(record, name, value, f"session config {key}={value}", True)
        elif key in CUDA_PROVIDER_OPTIONS:
            if on_cuda:
                cuda[key] = value
            add_setting(
                record,
                name,
                value,
                f"{key}={value}" if on_cuda else None,
                on_cuda,
                "" if on_cuda else "a CUDA execution provider option; the session is not on CUDA",
            )
        else:
            raise PolicyError(
                f"unknown onnxruntime engine option {key!r}: use a session config key "
                f"('session.*', 'optimization.*', 'mlas.*') or a CUDA provider option "
                f"({', '.join(sorted(CUDA_PROVIDER_OPTIONS))})"
            )
