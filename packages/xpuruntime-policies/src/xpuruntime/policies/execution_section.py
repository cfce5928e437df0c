"""The ``execution`` section of a policy file: its settings, their types and their checks.

Below both policy classes and the policy document: ExecutionPolicy is this section plus a
kernel policy, and reading a document (KernelPolicy.load included) checks its execution
section here, without building an ExecutionPolicy.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import Meta

from xpuruntime.policies import vocabulary
from xpuruntime.policies._convert import convert, format_path
from xpuruntime.policies._struct import PolicyStructMeta
from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import PolicyConflictError, PolicyValidationError

Precision: TypeAlias = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
Fallback: TypeAlias = Literal["error", "warn", "allow"]
PerformanceHint: TypeAlias = Literal["latency", "throughput"]
GraphOptimization: TypeAlias = Literal["disabled", "basic", "extended", "all"]
HostShapeCompute: TypeAlias = Literal["allow", "forbid"]
LockMode: TypeAlias = Literal["off", "record", "replay"]
EngineLogLevel: TypeAlias = Literal["error", "warning", "info", "verbose"]
# "nvls" and "nvls_tree" are NCCL's names too; they are read so that the refusal can say why.
CollectiveAlgorithm: TypeAlias = Literal[
    "ring", "tree", "collnet_direct", "collnet_chain", "pat", "nvls", "nvls_tree"
]
CollectiveProtocol: TypeAlias = Literal["ll", "ll128", "simple"]
PositiveInt: TypeAlias = Annotated[int, Meta(ge=1)]

DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]+)?|npu(:[0-9]+)?)$"
_DEVICE = re.compile(DEVICE_PATTERN)
_INT64 = (-(2**63), 2**63 - 1)


class MemoryPolicy(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    metaclass=PolicyStructMeta,
):
    """Device memory: the caching pool and an optional ceiling."""

    pool: Annotated[
        bool, Meta(description="Reuse freed device memory through the caching pool allocator.")
    ] = True
    limit_bytes: Annotated[
        PositiveInt | None,
        Meta(description="Most bytes the pool may hold; allocation beyond it raises."),
    ] = None

    def __post_init__(self) -> None:
        if not isinstance(self.pool, bool):
            raise PolicyValidationError(
                f"expected true or false, got {shown(self.pool)}", location="memory.pool"
            )
        limit = self.limit_bytes
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise PolicyValidationError(
                f"expected a positive number of bytes or None, got {shown(limit)}",
                location="memory.limit_bytes",
            )


#: Why NVLink multicast (NCCL's NVLS algorithms) cannot be enabled by a policy.
NVLS_REFUSAL = (
    "NVLink multicast (NCCL's NVLS / NVLSTree algorithms, NCCL_NVLS_ENABLE=1) stays off: a"
    " program that uses it can put every GPU of a shared host out of service, so xpuruntime"
    " never enables it. Choose 'ring', 'tree' or 'pat', or leave the algorithm to NCCL"
)


class CollectivePolicy(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    metaclass=PolicyStructMeta,
):
    """Collective communication (NCCL) for multi-GPU training: what NCCL may use.

    NCCL reads its configuration from the environment once, when a communicator is created,
    so ``xpuruntime.pytorch.distributed`` applies these settings before the process group
    starts and reads back what NCCL actually used. ``None`` leaves a setting to NCCL.
    """

    algorithm: Annotated[
        CollectiveAlgorithm | None,
        Meta(
            description="NCCL algorithm (NCCL_ALGO): ring, tree, collnet_direct,"
            " collnet_chain or pat (nvls and nvls_tree are refused); None lets NCCL choose."
        ),
    ] = None
    protocol: Annotated[
        CollectiveProtocol | None,
        Meta(description="NCCL protocol (NCCL_PROTO): ll, ll128 or simple; None lets NCCL choose."),
    ] = None
    min_channels: Annotated[
        PositiveInt | None, Meta(description="Fewest channels (NCCL_MIN_NCHANNELS).")
    ] = None
    max_channels: Annotated[
        PositiveInt | None, Meta(description="Most channels (NCCL_MAX_NCHANNELS).")
    ] = None
    buffer_size: Annotated[
        PositiveInt | None, Meta(description="Bytes of each channel's buffer (NCCL_BUFFSIZE).")
    ] = None
    p2p: Annotated[
        bool | None, Meta(description="Allow peer-to-peer transport (NCCL_P2P_DISABLE=0/1).")
    ] = None
    shm: Annotated[
        bool | None, Meta(description="Allow shared-memory transport (NCCL_SHM_DISABLE=0/1).")
    ] = None
    nvls: Annotated[
        bool,
        Meta(description="NVLink multicast (NVLS). Always false: setting it true is an error."),
    ] = False

    def __post_init__(self) -> None:
        if self.nvls is not False:
            raise PolicyValidationError(NVLS_REFUSAL, location="collectives.nvls")
        if isinstance(self.algorithm, str) and self.algorithm.lower().startswith("nvls"):
            raise PolicyValidationError(NVLS_REFUSAL, location="collectives.algorithm")
        for name, choices in (
            ("algorithm", typing.get_args(CollectiveAlgorithm)),
            ("protocol", typing.get_args(CollectiveProtocol)),
        ):
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise PolicyValidationError(
                    f"unknown {name} {shown(value)}. {choices_hint(str(value), choices)}",
                    location=f"collectives.{name}",
                )
        for name in ("min_channels", "max_channels", "buffer_size"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise PolicyValidationError(
                    f"expected a positive integer or None, got {shown(value)}",
                    location=f"collectives.{name}",
                )
        for name in ("p2p", "shm"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise PolicyValidationError(
                    f"expected true, false or None, got {shown(value)}",
                    location=f"collectives.{name}",
                )
        low, high = self.min_channels, self.max_channels
        if low is not None and high is not None and low > high:
            raise PolicyConflictError(
                f"min_channels={low} exceeds max_channels={high}; make min <= max",
                location="collectives",
            )

    @property
    def is_default(self) -> bool:
        """True when every setting is left to NCCL."""
        return self == CollectivePolicy()


class ExecutionSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``execution`` section of a policy file: every ExecutionPolicy setting but
    ``kernel_policy`` (which a document keeps in its ``kernel`` section)."""

    precision: Annotated[
        Precision, Meta(description="Numeric precision the engine computes in.")
    ] = "fp32"
    static_shape: Annotated[
        bool, Meta(description="Compile for fixed input shapes (input_shapes or the model's).")
    ] = False
    input_shapes: Annotated[
        dict[str, list[PositiveInt]] | None,
        Meta(description="Concrete shape of each named input, for static compilation."),
    ] = None
    fallback: Annotated[
        Fallback,
        Meta(
            description="When something cannot run as asked: 'error' raises, 'warn' warns"
            " and records, 'allow' records only."
        ),
    ] = "warn"
    deterministic: Annotated[
        bool, Meta(description="Use only deterministic kernels and algorithms.")
    ] = False
    engines: Annotated[
        list[str],
        Meta(min_length=1, description="Engine preference order when engine='auto'."),
    ] = msgspec.field(default_factory=lambda: list(vocabulary.DEFAULT_ENGINE_ORDER))
    device: Annotated[
        str,
        # The pattern is checked in __post_init__ (for a better message) and added to
        # the JSON Schema by xpuruntime.policies.schema.
        Meta(description="'auto', 'cpu', 'cuda', 'cuda:N', 'npu' or 'npu:N'."),
    ] = "auto"
    cuda_graphs: Annotated[
        bool, Meta(description="Capture and replay CUDA graphs (needs static shapes).")
    ] = False
    memory: Annotated[MemoryPolicy, Meta(description="Device memory pool settings.")] = (
        msgspec.field(default_factory=MemoryPolicy)
    )
    cache_dir: Annotated[
        str | None, Meta(description="Where compiled engines and autotune results are cached.")
    ] = None
    profiling: Annotated[bool, Meta(description="Collect profiler ranges and per-run timings.")] = (
        False
    )
    performance_hint: Annotated[
        PerformanceHint, Meta(description="Optimize for single-request latency or throughput.")
    ] = "latency"
    num_threads: Annotated[
        PositiveInt | None, Meta(description="CPU threads the engine may use (None: its default).")
    ] = None
    graph_optimization: Annotated[
        GraphOptimization, Meta(description="Graph optimization level of the engine.")
    ] = "all"
    quantized_model: Annotated[
        str | None,
        Meta(description="Path of a quantized (QDQ) model to run for precision int8."),
    ] = None
    engine_options: Annotated[
        dict[str, dict[str, Any]],
        Meta(
            description="Per-engine options passed through as given and recorded, by engine"
            " name; values are strings, numbers, booleans or lists of them."
        ),
    ] = msgspec.field(default_factory=dict)

    host_shape_compute: Annotated[
        HostShapeCompute,
        Meta(
            description="Whether the engine may run shape computation on the host CPU (ONNX"
            " Runtime's CPU-preferred shape subgraph, shape nodes OpenVINO or QNN keep on the"
            " CPU): 'allow' runs and records those nodes, 'forbid' makes them an error that"
            " names them. Kernel fallbacks follow 'fallback', not this setting."
        ),
    ] = "allow"
    lock: Annotated[
        LockMode,
        Meta(
            description="Decision lockfile: 'record' writes every kernel, algorithm, backend and"
            " engine-option decision to lock_file; 'replay' uses exactly the locked decisions"
            " (a choice that cannot be honoured follows 'fallback'); 'off' does neither."
        ),
    ] = "off"
    lock_file: Annotated[
        str | None, Meta(description="Path of the decision lockfile for lock='record'/'replay'.")
    ] = None
    engine_log_level: Annotated[
        EngineLogLevel,
        Meta(
            description="Engines' own log messages at or above this level go to Python logging"
            " (logger 'xpuruntime.engine.<engine>'); lower ones are dropped."
        ),
    ] = "warning"
    collectives: Annotated[
        CollectivePolicy,
        Meta(description="Collective communication (NCCL) settings for multi-GPU training."),
    ] = msgspec.field(default_factory=CollectivePolicy)


def checked_section(section: ExecutionSection) -> ExecutionSection:
    """The settings of ``section`` (an ExecutionPolicy's included) checked: a new section
    with coerced values (tuple -> list, ...) and canonical engine names; PolicyError if one
    is invalid or two contradict each other (kernel-policy conflicts are checked apart)."""
    values = {name: getattr(section, name) for name in SECTION_FIELDS}
    try:
        plain = msgspec.to_builtins(values, order="deterministic")
        msgspec.json.encode(plain)  # every setting must survive every file format
    except UnicodeEncodeError as exc:  # "\ud800" escapes in JSON/YAML make unpaired surrogates
        raise PolicyValidationError(
            f"text that is not valid Unicode ({exc.reason}): write the characters"
            " themselves, not surrogate escapes",
            location="execution",
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise PolicyValidationError(
            f"{exc}; settings hold only text, numbers, booleans, lists and mappings",
            location="execution",
        ) from None
    checked = convert(plain, ExecutionSection, location="execution")
    _check_values(checked)
    return checked


def _check_values(section: ExecutionSection) -> None:
    """Check ``section`` (a fresh one of :func:`checked_section`'s); normalize its names."""
    if section.lock != "off" and not section.lock_file:
        raise PolicyConflictError(
            f"lock={section.lock!r} needs lock_file (the lockfile to "
            + ("write" if section.lock == "record" else "read")
            + "); set lock_file or lock='off'",
            location="execution.lock_file",
        )
    if not _DEVICE.match(section.device):
        raise PolicyValidationError(
            f"unknown device {shown(section.device)}: expected 'auto', 'cpu', 'cuda', 'cuda:N',"
            f" 'npu' or 'npu:N' (N = device index). "
            # "gpu" is closest to "npu" by spelling, but a GPU is what was meant.
            + (
                "A GPU is 'cuda' (or 'cuda:N' for GPU N); `xpuruntime devices` lists "
                "this machine's devices."
                if section.device.split(":")[0].lower() == "gpu"
                else choices_hint(section.device.split(":")[0], ["auto", "cpu", "cuda", "npu"])
            ),
            location="execution.device",
        )
    engines: list[str] = []
    for index, name in enumerate(section.engines):
        try:
            canonical = vocabulary.canonical_engine(name)
        except PolicyValidationError as exc:
            exc.location = f"execution.engines[{index}]"
            raise
        if canonical in engines:
            raise PolicyValidationError(
                f"engine {canonical!r} is listed twice; list each engine once",
                location=f"execution.engines[{index}]",
            )
        engines.append(canonical)
    msgspec.structs.force_setattr(section, "engines", engines)
    options: dict[str, dict[str, Any]] = {}
    for engine, settings in section.engine_options.items():
        location = format_path(["execution", "engine_options", engine])
        try:
            canonical = vocabulary.canonical_engine(engine)
        except PolicyValidationError as exc:
            exc.location = location
            raise
        if canonical in options:
            raise PolicyConflictError(
                f"options for engine {canonical!r} are given twice (under an alias);"
                " merge them under one name",
                location=location,
            )
        for key, value in settings.items():
            _check_option_value(value, format_path(["execution", "engine_options", engine, key]))
        options[canonical] = settings
    msgspec.structs.force_setattr(section, "engine_options", options)


def _check_option_value(value: object, location: str) -> None:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool | str):
            continue
        if isinstance(item, int) and _INT64[0] <= item <= _INT64[1]:
            continue
        if isinstance(item, float) and math.isfinite(item):
            continue
        raise PolicyValidationError(
            f"engine options are strings, booleans, 64-bit integers, finite numbers or lists"
            f" of them; got {shown(item)}",
            location=location,
        )


#: The settings a policy file holds in its ``execution`` section.
SECTION_FIELDS: tuple[str, ...] = ExecutionSection.__struct_fields__

#: Settings of the ``execution`` section that are sub-sections (structs of their own).
NESTED_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "memory": MemoryPolicy,
    "collectives": CollectivePolicy,
}
