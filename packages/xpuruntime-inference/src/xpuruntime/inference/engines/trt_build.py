"""Build a TensorRT engine from an ONNX model under an ExecutionPolicy.

Written against TensorRT's Python API (8.6 .. 10.x) and adapting to what the installed
version has: strongly typed networks (``NetworkDefinitionCreationFlag.STRONGLY_TYPED``,
TensorRT >= 9) when the policy keeps the model's precision or the weak-typing precision
flags are gone; the builder flags FP16/BF16/TF32 only where they still exist; tactic sources
only where they are not removed; an optimization profile per dynamic input; a timing cache
that persists in ``ExecutionPolicy.cache_dir`` (or comes from the decision lockfile, see
``trt_lock``). Every choice is written to the record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.engines.trt_lock import TimingCacheRefused
from xpuruntime.inference.errors import InvalidModelError
from xpuruntime.inference.kernel_mapping import KernelSupport
from xpuruntime.inference.settings import add_setting
from xpuruntime.policies.errors import PolicyError
from xpuruntime.policies.vocabulary import SupportedKernel
from xpuruntime.runtime.errors import UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy

_OPT_LEVELS = {"disabled": 0, "basic": 1, "extended": 3, "all": 5}
_PRECISION_FLAGS = {"fp16": "FP16", "bf16": "BF16", "tf32": "TF32"}
_TACTIC_SOURCES = {
    ("matmul", "cublas"): "CUBLAS",
    ("matmul", "cublasLt"): "CUBLAS_LT",
    ("conv", "cudnn"): "CUDNN",
}
# TensorRT's own kernel families, kept whatever the kernel policy restricts.
_OWN_TACTIC_SOURCES = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
#: Dynamic dimensions without a range in the policy get min 1, opt 1, max this.
DEFAULT_MAX_DIM = 32


def supported_precisions(trt: Any) -> set[str]:
    """Precisions TensorRT can lower an fp32 model to through builder flags (if it has them)."""
    flags = trt.BuilderFlag
    return {"fp32"} | {p for p, flag in _PRECISION_FLAGS.items() if hasattr(flags, flag)}


def kernel_support(trt: Any) -> Any:
    """What TensorRT can do with a KernelPolicy entry: restrict tactic sources, no more."""

    def support(op: str, kernel: str) -> KernelSupport | None:
        source = _TACTIC_SOURCES.get((op, kernel))
        if (
            source is None
            or not hasattr(trt, "TacticSource")
            or not hasattr(trt.TacticSource, source)
        ):
            return None
        return KernelSupport(
            False,
            f"tactic_source.{op}",
            source,
            f"TensorRT may use {source} tactics but also its own kernels; "
            f"it cannot be made to use only {kernel}",
        )

    return support


def supported_kernels() -> list[SupportedKernel]:
    """The kernels :func:`kernel_support` steers towards, published (entry-point group
    ``xpuruntime.kernel_support``): never enforced, so a pin of one follows the fallback mode."""
    return [
        SupportedKernel(
            op,
            kernel,
            frozenset({"cuda"}),
            enforced=False,
            note=f"tactic source {source}, where the installed TensorRT still has it",
        )
        for (op, kernel), source in _TACTIC_SOURCES.items()
    ]


@dataclass
class BuilderSettings:
    """What the TensorRT builder is configured with: the adapter's part of the kit's BuildPlan
    (``plan.options["builder"]``)."""

    strongly_typed: bool
    precision: str
    profiles: dict[str, tuple[list[int], list[int], list[int]]]
    tactic_sources: list[str] = field(default_factory=list)


def shape_ranges(
    policy: ExecutionPolicy, inputs: Mapping[str, Sequence[int | str | None]]
) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """(min, opt, max) per input with dynamic dimensions.

    ``input_shapes`` fixes min = opt = max; ``engine_options["tensorrt"]["shape_ranges"]``
    gives ranges ``{"input": [[1, 3, 224, 224], [8, 3, 224, 224], [32, 3, 224, 224]]}``;
    other dynamic dimensions range 1..DEFAULT_MAX_DIM (recorded, so it is not hidden).
    """
    given = dict(policy.engine_options.get("tensorrt", {}).get("shape_ranges", {}))
    profiles = {}
    for name, dims in inputs.items():
        if all(isinstance(d, int) and d > 0 for d in dims):
            continue
        if policy.input_shapes and name in policy.input_shapes:
            shape = list(policy.input_shapes[name])
            profiles[name] = (shape, shape, shape)
        elif name in given:
            low, opt, high = (list(map(int, s)) for s in given[name])
            profiles[name] = (low, opt, high)
        else:
            fixed = [d if isinstance(d, int) and d > 0 else None for d in dims]
            profiles[name] = (
                [d or 1 for d in fixed],
                [d or 1 for d in fixed],
                [d or DEFAULT_MAX_DIM for d in fixed],
            )
    return profiles


def build_engine(
    trt: Any,
    logger: Any,
    model: Path,
    policy: ExecutionPolicy,
    plan: BuilderSettings,
    record: ExecutionRecord,
    timing_cache: Path | None,
    *,
    require_cached: bool = False,
) -> bytes:
    """Parse ``model``, configure the builder from ``plan``/``policy``, return the plan bytes.

    ``require_cached`` (replaying a lockfile): TensorRT must accept ``timing_cache`` and take
    every timed tactic from it; TimingCacheRefused otherwise.
    """
    builder = trt.Builder(logger)
    flags = 0
    if plan.strongly_typed:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    elif hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # needed before TRT 10
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    add_setting(
        record,
        "network_typing",
        "strongly typed" if plan.strongly_typed else "weakly typed",
        "STRONGLY_TYPED" if plan.strongly_typed else "precision flags",
        True,
        "types come from the model"
        if plan.strongly_typed
        else "builder precision flags let TensorRT lower precision",
    )
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(model)):
        raise _parse_error(parser, model)
    config = builder.create_builder_config()
    _configure_precision(trt, config, plan, record)
    _configure_policy(trt, config, policy, record, timing_cache)
    _configure_tactics(trt, config, plan, record)
    _configure_profiles(builder, config, plan, record)
    cache = None
    if timing_cache is not None:
        cache = config.create_timing_cache(
            timing_cache.read_bytes() if timing_cache.is_file() else b""
        )
        accepted = config.set_timing_cache(cache, ignore_mismatch=False)
        if require_cached:
            if accepted is False:
                raise TimingCacheRefused(
                    f"TensorRT {trt.__version__} refused the locked timing cache (recorded"
                    " for another device or TensorRT release)"
                )
            if hasattr(trt.BuilderFlag, "ERROR_ON_TIMING_CACHE_MISS"):
                config.set_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        if require_cached:
            raise TimingCacheRefused(
                "TensorRT could not build from the locked timing cache alone (a layer it does"
                " not cover would have been timed; TensorRT's log names it)"
            )
        raise UnsupportedOperationError(
            f"TensorRT {trt.__version__} could not build an engine for {model} under this "
            f"policy; its log above says which layer failed"
        )
    if timing_cache is not None:
        timing_cache.parent.mkdir(parents=True, exist_ok=True)
        timing_cache.write_bytes(bytes(memoryview(config.get_timing_cache().serialize())))
    return bytes(memoryview(serialized))


def _parse_error(parser: Any, model: Path) -> Exception:
    problems = []
    unsupported = False
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        node = getattr(error, "node_name", lambda: "")() or str(
            getattr(error, "node", lambda: "")()
        )
        op = getattr(error, "node_operator", lambda: "")()
        unsupported |= "UNSUPPORTED" in str(getattr(error, "code", lambda: "")())
        problems.append(f"node {node!r} ({op}): {error.desc()}" if node or op else error.desc())
    text = "; ".join(problems) or "no details"
    if unsupported:
        return UnsupportedOperationError(f"TensorRT cannot build {model}: {text}")
    return InvalidModelError(f"TensorRT's ONNX parser rejected {model}: {text}")


def _configure_precision(
    trt: Any, config: Any, plan: BuilderSettings, record: ExecutionRecord
) -> None:
    flags = trt.BuilderFlag
    if plan.precision == "fp32" and hasattr(flags, "TF32"):
        # TF32 is on by default in TensorRT, typed network or not: strict fp32 turns it off.
        config.clear_flag(flags.TF32)
        add_setting(record, "precision", "fp32", "cleared BuilderFlag.TF32", True)
        return
    flag = _PRECISION_FLAGS.get(plan.precision)
    if not plan.strongly_typed and flag is not None and hasattr(flags, flag):
        config.set_flag(getattr(flags, flag))
        add_setting(record, "precision", plan.precision, f"BuilderFlag.{flag}", True)


def _configure_policy(
    trt: Any,
    config: Any,
    policy: ExecutionPolicy,
    record: ExecutionRecord,
    timing_cache: Path | None,
) -> None:
    level = _OPT_LEVELS[policy.graph_optimization]
    if hasattr(config, "builder_optimization_level"):
        config.builder_optimization_level = level
        add_setting(
            record,
            "graph_optimization",
            policy.graph_optimization,
            f"builder_optimization_level={level}",
            True,
        )
    if policy.memory.limit_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, policy.memory.limit_bytes)
        add_setting(
            record,
            "memory.limit_bytes",
            policy.memory.limit_bytes,
            f"WORKSPACE pool limit {policy.memory.limit_bytes}",
            True,
            "limits the builder's scratch memory; weights and activations come on top",
        )
    if hasattr(trt, "ProfilingVerbosity"):
        # Detailed layer information feeds the record's per-layer precision and tactic.
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    add_setting(
        record,
        "deterministic",
        policy.deterministic,
        "timing cache reuse" if timing_cache is not None else None,
        not policy.deterministic or timing_cache is not None,
        "TensorRT has no deterministic-build flag; a persisted timing cache (cache_dir) "
        "makes its tactic choices repeatable",
    )
    if policy.cuda_graphs:
        add_setting(
            record,
            "cuda_graphs",
            True,
            None,
            False,
            "this engine runs with execute_async_v3 without graph capture",
        )
    if policy.num_threads is not None:
        add_setting(
            record,
            "num_threads",
            policy.num_threads,
            None,
            False,
            "TensorRT runs on the GPU; it has no CPU thread setting",
        )
    for key, value in policy.engine_options.get("tensorrt", {}).items():
        if key == "shape_ranges":
            continue
        if not hasattr(config, key):
            raise PolicyError(
                f"unknown tensorrt engine option {key!r}: it must be an IBuilderConfig attribute "
                f"(builder_optimization_level, avg_timing_iterations, max_aux_streams, ...) or "
                f"'shape_ranges'"
            )
        setattr(config, key, value)
        add_setting(
            record, f"engine_options.tensorrt.{key}", value, f"IBuilderConfig.{key}={value}", True
        )


def _configure_tactics(
    trt: Any, config: Any, plan: BuilderSettings, record: ExecutionRecord
) -> None:
    if not plan.tactic_sources:
        return
    mask = 0
    for name in [*plan.tactic_sources, *_OWN_TACTIC_SOURCES]:
        if hasattr(trt.TacticSource, name):
            mask |= 1 << int(getattr(trt.TacticSource, name))
    config.set_tactic_sources(mask)
    add_setting(
        record,
        "tactic_sources",
        plan.tactic_sources,
        f"mask {mask:#x}",
        True,
        "plus TensorRT's own kernel families",
    )


def _configure_profiles(
    builder: Any, config: Any, plan: BuilderSettings, record: ExecutionRecord
) -> None:
    if not plan.profiles:
        return
    profile = builder.create_optimization_profile()
    for name, (low, opt, high) in plan.profiles.items():
        profile.set_shape(name, low, opt, high)
    config.add_optimization_profile(profile)
    add_setting(
        record,
        "optimization_profile",
        {k: list(v) for k, v in plan.profiles.items()},
        "min/opt/max per dynamic input",
        True,
        f"unnamed dynamic dimensions range 1..{DEFAULT_MAX_DIM}; set input_shapes or "
        f"engine_options['tensorrt']['shape_ranges'] to change it",
    )
