"""KernelPolicy: which kernel runs each op, and how strictly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xpuruntime.policies import policy_file, vocabulary
from xpuruntime.policies._convert import format_path
from xpuruntime.policies._suggest import shown
from xpuruntime.policies.conflicts import check_conflicts
from xpuruntime.policies.errors import PolicyValidationError
from xpuruntime.policies.execution_section import checked_section
from xpuruntime.policies.kernel_section import AUTO, MODES, KernelSection, Mode, OpPolicy
from xpuruntime.policies.strategy import AutoSelectStrategy

if TYPE_CHECKING:
    from pathlib import Path

    from xpuruntime.policies.formats import Format

# The section's names stay importable from here, where they were defined before.
__all__ = ["AUTO", "MODES", "KernelPolicy", "KernelSection", "Mode", "OpPolicy"]


class KernelPolicy:
    """Which kernel runs each op: ``KernelPolicy(matmul="cublasLt", attention="flash_v2")``.

    A plain kernel name pins the op (it must run that kernel, else
    UnsupportedOperationError); ``"auto"`` lets ``strategy`` choose; ``OpPolicy(kernel=...,
    mode="prefer")`` or ``.set(op, kernel, mode="prefer")`` prefers a kernel and falls back,
    recorded, where it cannot run. Ops the policy does not mention are chosen automatically.

    Op and kernel names are checked against :mod:`xpuruntime.policies.vocabulary`; an
    unknown name raises UnknownOpError / UnknownKernelError listing the valid choices.
    """

    __slots__ = ("_entries", "_strategy")

    def __init__(
        self,
        strategy: AutoSelectStrategy | str = AutoSelectStrategy.FirstSupported,
        **ops: str | OpPolicy,
    ) -> None:
        self._strategy = AutoSelectStrategy.parse(strategy)
        self._entries: dict[str, OpPolicy] = {}
        for op, entry in ops.items():
            self._entries[op] = _checked_entry(op, entry)

    @classmethod
    def coerce(
        cls, value: KernelPolicy | str | Mapping[str, str | OpPolicy] | None
    ) -> KernelPolicy:
        """The policy meant by a ``kernel_policy=`` argument.

        A KernelPolicy is returned as is; ``None`` and ``"auto"`` mean every op automatic
        under FirstSupported; a mapping is read as ``op -> kernel``.
        """
        if isinstance(value, KernelPolicy):
            return value
        if value is None or value == AUTO:
            return cls()
        if isinstance(value, Mapping):
            policy = cls()
            for op, entry in value.items():
                policy._entries[op] = _checked_entry(op, entry)
            return policy
        raise PolicyValidationError(
            f"expected a KernelPolicy, 'auto', None or a mapping op -> kernel,"
            f" got {type(value).__name__} {shown(value)}"
        )

    # -- editing ---------------------------------------------------------------------

    def set(self, op: str, kernel: str, mode: Mode = "pin") -> KernelPolicy:
        """Set the kernel of ``op`` (``"auto"`` for automatic); returns self for chaining."""
        automatic = kernel == AUTO and mode in ("pin", AUTO)
        entry = OpPolicy(mode="auto") if automatic else _op_policy(op, kernel, mode)
        self._entries[op] = _checked_entry(op, entry)
        return self

    def remove(self, op: str) -> KernelPolicy:
        """Forget the policy of ``op`` (it becomes automatic); returns self for chaining."""
        self._entries.pop(op, None)
        return self

    def copy(self) -> KernelPolicy:
        """An independent copy."""
        clone = KernelPolicy(self._strategy)
        clone._entries = dict(self._entries)
        return clone

    # -- reading ---------------------------------------------------------------------

    def get(self, op: str) -> str | None:
        """The kernel set for ``op``, ``"auto"`` for an automatic op, None when unset."""
        entry = self._entries.get(op)
        if entry is None:
            return None
        return entry.kernel if entry.kernel is not None else AUTO

    def mode(self, op: str) -> Mode | None:
        """``"pin"``, ``"prefer"`` or ``"auto"`` for ``op``; None when the policy omits it."""
        entry = self._entries.get(op)
        return entry.mode if entry is not None else None

    @property
    def entries(self) -> dict[str, OpPolicy]:
        """Every op's OpPolicy (a copy)."""
        return dict(self._entries)

    @property
    def preferences(self) -> dict[str, str]:
        """op -> kernel name (``"auto"`` for automatic ops), as in the seed API."""
        return {op: self.get(op) or AUTO for op in self._entries}

    @property
    def strategy(self) -> AutoSelectStrategy:
        """How ops in mode ``auto`` (and ops the policy omits) choose their kernel."""
        return self._strategy

    @strategy.setter
    def strategy(self, value: AutoSelectStrategy | str) -> None:
        self._strategy = AutoSelectStrategy.parse(value)

    def __contains__(self, op: object) -> bool:
        return op in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KernelPolicy):
            return NotImplemented
        return self._strategy is other._strategy and self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]  # mutable: set() and remove() edit in place

    def __repr__(self) -> str:
        parts = [f"{op}={_shorthand(entry)!r}" for op, entry in self._entries.items()]
        if self._strategy is not AutoSelectStrategy.FirstSupported:
            parts.append(f"strategy={self._strategy!r}")
        return f"KernelPolicy({', '.join(parts)})"

    # -- serialization ---------------------------------------------------------------

    def to_section(self) -> dict[str, Any]:
        """The ``kernel`` section of a policy document (ops sorted by name)."""
        return {
            "strategy": self._strategy.value,
            "ops": {op: _encode_entry(self._entries[op]) for op in sorted(self._entries)},
        }

    @classmethod
    def from_section(cls, section: KernelSection) -> KernelPolicy:
        """Build from a decoded ``kernel`` section (names are checked)."""
        policy = cls(section.strategy)
        for op, entry in section.ops.items():
            policy._entries[op] = _checked_entry(op, entry)
        return policy

    def to_dict(self) -> dict[str, Any]:
        """The policy document holding this policy: ``{"schema_version": 1, "kernel": {...}}``."""
        return policy_file.document_data(kernel=self.to_section())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> KernelPolicy:
        """Read the ``kernel`` section of a policy document (defaults when it has none).

        The whole document is checked, its execution section included, as a PolicyDocument
        reads it.
        """
        parsed = policy_file.read(data, source=source)
        try:
            policy = cls() if parsed.kernel is None else cls.from_section(parsed.kernel)
            if parsed.execution is not None:
                execution = checked_section(parsed.execution)
                check_conflicts(execution)  # the section alone first, as ExecutionPolicy does
                if parsed.kernel is not None:
                    check_conflicts(execution, policy)
        except PolicyValidationError as exc:
            exc.source = exc.source or source
            raise
        return policy

    def save(self, path: str | Path, *, format: Format | None = None) -> Path:
        """Write this policy as a document; the format follows the suffix (.json/.yaml/.toml)."""
        return policy_file.save(self.to_dict(), path, format=format)

    @classmethod
    def load(cls, path: str | Path, *, format: Format | None = None) -> KernelPolicy:
        """Read the ``kernel`` section of a policy file (defaults when it has none)."""
        data, source = policy_file.read_path(path, format=format)
        return cls.from_dict(data, source=source)

    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of :meth:`to_dict`; stable across formats."""
        return policy_file.content_hash(self.to_dict())


def _op_policy(op: str, kernel: object, mode: object) -> OpPolicy:
    try:
        return OpPolicy(kernel=kernel, mode=mode)  # type: ignore[arg-type]  # checked inside
    except PolicyValidationError as exc:
        exc.location = format_path(["kernel", "ops", op])
        raise


def _checked_entry(op: object, entry: object) -> OpPolicy:
    """``entry`` as an OpPolicy whose op and kernel exist."""
    if not isinstance(op, str):
        raise PolicyValidationError(f"op names are strings, got {type(op).__name__} {shown(op)}")
    location = format_path(["kernel", "ops", op])
    if isinstance(entry, str):
        entry = OpPolicy(mode="auto") if entry == AUTO else _op_policy(op, entry, "pin")
    if not isinstance(entry, OpPolicy):
        raise PolicyValidationError(
            f"expected a kernel name, 'auto' or OpPolicy(...), got {type(entry).__name__}"
            f" {shown(entry)}",
            location=location,
        )
    try:
        if entry.kernel is None:
            vocabulary.kernels_for(op)
            return entry
        spec = vocabulary.find_kernel(op, entry.kernel)
    except PolicyValidationError as exc:
        exc.location = location
        raise
    # An alias ("aten") is stored as the kernel's name ("torch"): one policy, one hash.
    return entry if spec.name == entry.kernel else OpPolicy(kernel=spec.name, mode=entry.mode)


def _shorthand(entry: OpPolicy) -> str | OpPolicy:
    if entry.mode == "auto":
        return AUTO
    if entry.mode == "pin" and entry.kernel is not None:
        return entry.kernel
    return entry


def _encode_entry(entry: OpPolicy) -> str | dict[str, Any]:
    short = _shorthand(entry)
    return short if isinstance(short, str) else {"kernel": entry.kernel, "mode": entry.mode}
