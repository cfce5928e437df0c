"""ExecutionPolicy: precision, shapes, engines, device, memory and fallback behaviour."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import Meta

from xpuruntime.policies import vocabulary
from xpuruntime.policies._convert import convert, format_path
from xpuruntime.policies._struct import PolicyStructMeta
from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import PolicyConflictError, PolicyValidationError
from xpuruntime.policies.kernel_policy import KernelPolicy

if TYPE_CHECKING:
    from pathlib import Path

    from xpuruntime.policies.formats import Format

Precision: TypeAlias = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
Fallback: TypeAlias = Literal["error", "warn", "allow"]
PerformanceHint: TypeAlias = Literal["latency", "throughput"]
GraphOptimization: TypeAlias = Literal["disabled", "basic", "extended", "all"]
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


class ExecutionPolicy(
    ExecutionSection,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    metaclass=PolicyStructMeta,
):
    """How a model or a training step runs: ``ExecutionPolicy(precision="int8", static_shape=True)``.

    Immutable; :meth:`replace` returns a modified copy. Every value is checked when the
    policy is built (types, choices, engine names, and settings that contradict each
    other), so an ExecutionPolicy that exists is valid.
    """

    kernel_policy: KernelPolicy | None = None

    def __post_init__(self) -> None:
        values = {name: getattr(self, name) for name in SECTION_FIELDS}
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
        section = convert(plain, ExecutionSection, location="execution")
        for name in SECTION_FIELDS:  # keep the checked, coerced values (tuple -> list, ...)
            msgspec.structs.force_setattr(self, name, getattr(section, name))
        self._check_values()
        if self.kernel_policy is not None:
            # A private copy: editing the caller's policy must not change this one.
            given: object = self.kernel_policy
            kernel = KernelPolicy.coerce(given).copy()  # type: ignore[arg-type]  # checked inside
            msgspec.structs.force_setattr(self, "kernel_policy", kernel)
        from xpuruntime.policies.conflicts import check_conflicts

        check_conflicts(self, self.kernel_policy)

    def _check_values(self) -> None:
        if not _DEVICE.match(self.device):
            raise PolicyValidationError(
                f"unknown device {shown(self.device)}: expected 'auto', 'cpu', 'cuda', 'cuda:N',"
                f" 'npu' or 'npu:N' (N = device index). "
                + choices_hint(self.device.split(":")[0], ["auto", "cpu", "cuda", "npu"]),
                location="execution.device",
            )
        engines: list[str] = []
        for index, name in enumerate(self.engines):
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
        msgspec.structs.force_setattr(self, "engines", engines)
        options: dict[str, dict[str, Any]] = {}
        for engine, settings in self.engine_options.items():
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
                _check_option_value(
                    value, format_path(["execution", "engine_options", engine, key])
                )
            options[canonical] = settings
        msgspec.structs.force_setattr(self, "engine_options", options)

    def __hash__(self) -> int:
        # Frozen, but holds lists and dicts: hash the canonical form instead of the fields.
        # (Replace kernel_policy rather than editing it in place, or the hash goes stale.)
        return hash(self.content_hash())

    def replace(self, **changes: Any) -> ExecutionPolicy:
        """A copy with ``changes`` applied (and checked)."""
        current = {name: getattr(self, name) for name in self.__struct_fields__}
        return ExecutionPolicy(**{**current, **changes})

    def __repr__(self) -> str:
        defaults = _default_values()
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name in self.__struct_fields__
            if getattr(self, name) != defaults[name]
        ]
        return f"ExecutionPolicy({', '.join(shown)})"

    # -- serialization ---------------------------------------------------------------

    def to_section(self) -> dict[str, Any]:
        """The ``execution`` section of a policy document (unset optional values omitted)."""
        values = {name: getattr(self, name) for name in SECTION_FIELDS}
        plain: dict[str, Any] = msgspec.to_builtins(values)
        plain["memory"] = {k: v for k, v in plain["memory"].items() if v is not None}
        return {name: value for name, value in plain.items() if value is not None}

    def to_dict(self) -> dict[str, Any]:
        """The policy document of this policy (its kernel policy in the ``kernel`` section)."""
        from xpuruntime.policies.document import PolicyDocument

        return PolicyDocument(execution=self).to_dict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExecutionPolicy:
        """Read a policy document; its ``kernel`` section becomes ``kernel_policy``."""
        from xpuruntime.policies.document import PolicyDocument

        return PolicyDocument.from_dict(data, source=source).execution_policy()

    def save(self, path: str | Path, *, format: Format | None = None) -> Path:
        """Write this policy as a document; the format follows the suffix (.json/.yaml/.toml)."""
        from xpuruntime.policies.document import PolicyDocument

        return PolicyDocument(execution=self).save(path, format=format)

    @classmethod
    def load(cls, path: str | Path, *, format: Format | None = None) -> ExecutionPolicy:
        """Read a policy file; its ``kernel`` section becomes ``kernel_policy``."""
        from xpuruntime.policies.document import load_policy

        return load_policy(path, format=format).execution_policy()

    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of :meth:`to_dict`; stable across formats."""
        from xpuruntime.policies.document import PolicyDocument

        return PolicyDocument(execution=self).content_hash()


def _default_values() -> dict[str, Any]:
    return {
        info.name: info.default_factory() if info.default is msgspec.NODEFAULT else info.default
        for info in msgspec.structs.fields(ExecutionPolicy)
    }


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
