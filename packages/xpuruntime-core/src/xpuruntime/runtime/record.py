"""The execution record: what was asked, what actually ran, and why.

One schema for inference sessions and training steps (``kind`` tells them apart), so a
record from ``InferenceSession.record()`` and one from ``xpuruntime.pytorch.explain()``
can be stored, diffed and rendered by the same tools. The JSON Schema is exported by
:func:`record_json_schema`.

Compatibility rule: :data:`RECORD_SCHEMA_VERSION` is bumped whenever a field is added,
removed or changes meaning. A reader accepts records of its own version and of every older
one (fields added since have defaults), and rejects a newer version or a field it does not
know with :class:`RecordSchemaError`, which says to upgrade xpuruntime: a record is never read
half-understood.

Fallbacks go through :class:`~xpuruntime.runtime.decisions.Decisions`, which applies the
policy's ``fallback`` mode (``error`` raises, ``warn`` warns and records, ``allow`` records)
through :meth:`ExecutionRecord.fallback`, so no engine can fall back without a trace and no
caller picks the mode by hand.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
import warnings
from typing import Any, Literal

import msgspec

from xpuruntime.runtime.errors import FallbackError, RecordSchemaError, UnsupportedOperationError

#: 2 added NodeRecord.placement/reason, DecisionRecord.status, ExecutionRecord.policy_sources
#: and RunRecord.device.
RECORD_SCHEMA_VERSION = 2

# (seconds since the epoch, "YYYY-MM-DDTHH:MM:SS" of that second in UTC)
_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Now in UTC as ``datetime.now(timezone.utc).isoformat()`` writes it, the second
    formatted once per second: a training scope makes a record per entry, and isoformat()
    alone costs microseconds."""
    global _second
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    if _second[0] != seconds:
        text = _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat()
        _second = (seconds, text.removesuffix("+00:00"))
    prefix = _second[1]
    return f"{prefix}.{micros:06d}+00:00" if micros else f"{prefix}+00:00"


FallbackMode = Literal["error", "warn", "allow"]
CopyDirection = Literal["host_to_device", "device_to_host", "device_to_device"]
#: Where a node ran relative to the request: on the requested device, on the host as shape
#: computation the engine places there by design, or elsewhere because of a fallback.
Placement = Literal["requested", "host_shape", "fallback"]
#: How a decision came about: taken now, replayed from a lockfile, or a fallback from the
#: locked or requested choice.
DecisionStatus = Literal["decided", "locked", "fallen_back"]


class FallbackWarning(UserWarning):
    """Emitted when ``fallback="warn"`` lets something run elsewhere than requested."""


class Choice(msgspec.Struct, forbid_unknown_fields=True):
    """A requested-vs-chosen pair (engine, device, execution provider ...) with its reason."""

    requested: str | None
    chosen: str | None
    reason: str = ""


class NodeRecord(msgspec.Struct, forbid_unknown_fields=True):
    """One graph node / op: where it was asked to run, where it ran, and why.

    ``placement`` classifies a node that ran elsewhere than requested: ``host_shape`` for
    shape computation the engine keeps on the host by design, ``fallback`` when the requested
    device has no kernel for it; ``reason`` says which. None where the engine reports no
    placement.
    """

    name: str
    op_type: str
    requested: str | None = None
    chosen: str | None = None
    kernel: str | None = None
    precision: str | None = None
    placement: Placement | None = None
    reason: str = ""


class FallbackRecord(msgspec.Struct, forbid_unknown_fields=True):
    """Something ran elsewhere than requested, and the policy mode that allowed it."""

    what: str
    requested: str
    chosen: str
    reason: str
    mode: FallbackMode


class SettingRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A policy setting mapped to an engine option, and whether the engine honoured it."""

    name: str
    requested: Any
    applied: Any = None
    honoured: bool = True
    note: str = ""


class DecisionRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A dispatcher decision: which kernel an op resolved to, by which mode, and why.

    ``status`` says whether it was decided now, replayed from a lockfile (``locked``), or
    fell back from the locked or requested choice (``fallen_back``, reason given).
    """

    op: str
    kernel: str
    mode: str
    reason: str
    shape: str = ""
    dtype: str = ""
    device: str = ""
    status: DecisionStatus = "decided"


class CopyRecord(msgspec.Struct, forbid_unknown_fields=True):
    """Host/device copies of one run, aggregated per direction."""

    direction: CopyDirection
    count: int
    bytes: int


class RunRecord(msgspec.Struct, forbid_unknown_fields=True):
    """One ``run`` / training step: timing, copies and synchronisations.

    ``device`` names the device the run ran on where one record merges runs of several
    devices (a session pool); None where the record's ``device`` says it.
    """

    index: int
    latency_ms: float
    copies: list[CopyRecord] = msgspec.field(default_factory=list)
    syncs: int = 0
    io_binding: bool = False
    device: str | None = None


class KernelRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A device kernel observed by a profiler, attributed to the op that launched it."""

    name: str
    op: str | None = None
    library: str | None = None
    count: int = 1
    total_us: float = 0.0


class ExecutionRecord(msgspec.Struct, forbid_unknown_fields=True):
    """What ran and why, for one inference session or one training step."""

    kind: Literal["inference", "training"]
    schema_version: int = RECORD_SCHEMA_VERSION
    created_at: str = msgspec.field(default_factory=utc_now)
    model: str | None = None
    policy: dict[str, Any] = msgspec.field(default_factory=dict)
    policy_hash: str | None = None
    #: Which layer set each policy setting (dotted path -> "policy", "environment (...)",
    #: "argument"); settings absent here kept their defaults.
    policy_sources: dict[str, str] = msgspec.field(default_factory=dict)
    environment: dict[str, Any] = msgspec.field(default_factory=dict)
    environment_hash: str | None = None
    engine: Choice | None = None
    device: Choice | None = None
    precision: Choice | None = None
    settings: list[SettingRecord] = msgspec.field(default_factory=list)
    nodes: list[NodeRecord] = msgspec.field(default_factory=list)
    decisions: list[DecisionRecord] = msgspec.field(default_factory=list)
    fallbacks: list[FallbackRecord] = msgspec.field(default_factory=list)
    runs: list[RunRecord] = msgspec.field(default_factory=list)
    kernels: list[KernelRecord] = msgspec.field(default_factory=list)
    cache: dict[str, Any] = msgspec.field(default_factory=dict)
    notes: list[str] = msgspec.field(default_factory=list)

    def fallback(
        self, *, what: str, requested: str, chosen: str, reason: str, mode: FallbackMode
    ) -> None:
        """Apply the policy's fallback mode to one fallback, recording it unless it raises."""
        message = f"{what}: requested {requested!r} but it would run on {chosen!r}: {reason}"
        if mode == "error":
            raise FallbackError(
                f"{message}. The policy says fallback='error'; fix the cause above, or set "
                f"ExecutionPolicy(fallback='warn') or 'allow' to accept and record the fallback."
            )
        self.fallbacks.append(
            FallbackRecord(what=what, requested=requested, chosen=chosen, reason=reason, mode=mode)
        )
        if mode == "warn":
            warnings.warn(message, FallbackWarning, stacklevel=_user_stacklevel())

    def kernel_fallback(
        self,
        *,
        op: str,
        kernel: str,
        entry_mode: str,
        chosen: str,
        reason: str,
        mode: FallbackMode,
        hint: str = "",
    ) -> None:
        """A kernel the KernelPolicy names cannot run: the one rule for training and inference.

        A pinned kernel (``entry_mode="pin"``) under ``fallback="error"`` raises
        :class:`UnsupportedOperationError`; under ``warn`` / ``allow`` it is a fallback of that
        mode. A preferred kernel accepts a fallback by definition, so it is recorded with
        ``allow`` under ``fallback="allow"`` and warned otherwise. ``hint`` (a sentence) says
        what else the user can do, before the generic advice.
        """
        if entry_mode == "pin" and mode == "error":
            raise UnsupportedOperationError(
                f"KernelPolicy pins {op}={kernel!r} but {reason}. {hint}Set mode='prefer' "
                f"(KernelPolicy().set({op!r}, {kernel!r}, mode='prefer')) or "
                f"ExecutionPolicy(fallback='warn') to run {chosen} and record it."
            )
        recorded: FallbackMode = (
            mode if entry_mode == "pin" else ("allow" if mode == "allow" else "warn")
        )
        self.fallback(
            what=f"kernel for {op}", requested=kernel, chosen=chosen, reason=reason, mode=recorded
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-compatible Python objects."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    def to_json(self, *, indent: int = 2) -> str:
        """The record as JSON text (the documented schema, see :func:`record_json_schema`)."""
        return msgspec.json.format(msgspec.json.encode(self).decode(), indent=indent)

    @classmethod
    def from_json(cls, data: str | bytes) -> ExecutionRecord:
        """Parse and validate a record written by :meth:`to_json` (this or an older version).

        Raises :class:`RecordSchemaError` for a newer ``schema_version``, an unknown field,
        or anything that is not a record.
        """
        try:
            header = msgspec.json.decode(data, type=_Header)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RecordSchemaError(f"not an execution record: {exc}") from None
        version = header.schema_version
        if not 1 <= version <= RECORD_SCHEMA_VERSION:
            raise RecordSchemaError(
                f"execution record schema_version {version} is not readable by this "
                f"xpuruntime (it reads versions 1 to {RECORD_SCHEMA_VERSION}); "
                + (
                    "upgrade xpuruntime-core"
                    if version > RECORD_SCHEMA_VERSION
                    else "the record is damaged"
                )
            )
        try:
            record = msgspec.json.decode(data, type=cls)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RecordSchemaError(
                f"execution record (schema_version {version}) does not match the schema: "
                f"{exc}; a field this xpuruntime does not know means the record comes from a "
                "newer release: upgrade xpuruntime-core"
            ) from None
        return record


class _Header(msgspec.Struct):
    """The one field read before the rest: which schema a record claims."""

    schema_version: int = 1


def _user_stacklevel() -> int:
    """Stack level of the first caller outside xpuruntime, so a warning points at user code
    (the engine that hit the fallback may be several xpuruntime frames deep)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(
        "xpuruntime."
    ):
        frame = frame.f_back
        level += 1
    return level


def record_json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of :class:`ExecutionRecord`."""
    return msgspec.json.schema(ExecutionRecord)
