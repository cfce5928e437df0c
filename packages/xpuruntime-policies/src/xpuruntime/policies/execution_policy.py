"""ExecutionPolicy: precision, shapes, engines, device, memory and fallback behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from xpuruntime.policies import policy_file
from xpuruntime.policies._struct import PolicyStructMeta
from xpuruntime.policies.conflicts import check_conflicts
from xpuruntime.policies.errors import PolicyValidationError
from xpuruntime.policies.execution_section import (
    DEVICE_PATTERN,
    NESTED_SECTIONS,
    NVLS_REFUSAL,
    SECTION_FIELDS,
    CollectiveAlgorithm,
    CollectivePolicy,
    CollectiveProtocol,
    EngineLogLevel,
    ExecutionSection,
    Fallback,
    GraphOptimization,
    HostShapeCompute,
    LockMode,
    MemoryPolicy,
    PerformanceHint,
    PositiveInt,
    Precision,
    checked_section,
)
from xpuruntime.policies.kernel_policy import KernelPolicy

if TYPE_CHECKING:
    from pathlib import Path

    from xpuruntime.policies.formats import Format

# The section's names stay importable from here, where they were defined before.
__all__ = [
    "DEVICE_PATTERN",
    "NESTED_SECTIONS",
    "NVLS_REFUSAL",
    "SECTION_FIELDS",
    "CollectiveAlgorithm",
    "CollectivePolicy",
    "CollectiveProtocol",
    "EngineLogLevel",
    "ExecutionPolicy",
    "ExecutionSection",
    "Fallback",
    "GraphOptimization",
    "HostShapeCompute",
    "LockMode",
    "MemoryPolicy",
    "PerformanceHint",
    "PositiveInt",
    "Precision",
]


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
        section = checked_section(self)
        for name in SECTION_FIELDS:  # keep the checked, coerced values (tuple -> list, ...)
            msgspec.structs.force_setattr(self, name, getattr(section, name))
        if self.kernel_policy is not None:
            # A private copy: editing the caller's policy must not change this one.
            given: object = self.kernel_policy
            kernel = KernelPolicy.coerce(given).copy()  # type: ignore[arg-type]  # checked inside
            msgspec.structs.force_setattr(self, "kernel_policy", kernel)
        check_conflicts(self, self.kernel_policy)

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
        for nested in NESTED_SECTIONS:
            plain[nested] = {k: v for k, v in plain[nested].items() if v is not None}
        return {name: value for name, value in plain.items() if value is not None}

    def to_dict(self) -> dict[str, Any]:
        """The policy document of this policy (its kernel policy in the ``kernel`` section)."""
        kernel = self.kernel_policy
        return policy_file.document_data(
            kernel=None if kernel is None else kernel.to_section(), execution=self.to_section()
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExecutionPolicy:
        """Read a policy document; its ``kernel`` section becomes ``kernel_policy``."""
        parsed = policy_file.read(data, source=source)
        try:
            kernel = None if parsed.kernel is None else KernelPolicy.from_section(parsed.kernel)
            settings = {} if parsed.execution is None else msgspec.structs.asdict(parsed.execution)
            # The section alone first: its own contradictions are reported as such.
            return cls(**settings).replace(kernel_policy=kernel)
        except PolicyValidationError as exc:
            exc.source = exc.source or source
            raise

    def save(self, path: str | Path, *, format: Format | None = None) -> Path:
        """Write this policy as a document; the format follows the suffix (.json/.yaml/.toml)."""
        return policy_file.save(self.to_dict(), path, format=format)

    @classmethod
    def load(cls, path: str | Path, *, format: Format | None = None) -> ExecutionPolicy:
        """Read a policy file; its ``kernel`` section becomes ``kernel_policy``."""
        data, source = policy_file.read_path(path, format=format)
        return cls.from_dict(data, source=source)

    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of :meth:`to_dict`; stable across formats."""
        return policy_file.content_hash(self.to_dict())


def _default_values() -> dict[str, Any]:
    return {
        info.name: info.default_factory() if info.default is msgspec.NODEFAULT else info.default
        for info in msgspec.structs.fields(ExecutionPolicy)
    }
