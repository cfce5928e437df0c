"""The decision lockfile: what was decided under a policy, so that it can be replayed.

A policy says what is wanted; a lockfile says what was *decided* under it: the kernel the
dispatcher chose for a matmul shape, the cuBLASLt algorithm it timed, the SDPA backend PyTorch
picked for an attention call, the options an engine session ran with, TensorRT's timing cache.
Each entry is keyed by its op signature (``domain``, ``op``, ``shape``, ``dtype``, ``device``,
``layout``, ``model``) and names the environment fingerprint it was taken under; the
fingerprints are stored once, in ``environments``, by their hash. A file::

    {"schema_version": 1,
     "content_hash": "<sha256 of the canonical JSON of everything else>",
     "environments": {"<fingerprint hash>": {"gpu": ["NVIDIA H100 ..."], ...}},
     "entries": [{"domain": "core", "op": "matmul", "shape": "[64, 64, 64]", ...,
                  "choice": {"kernel": "cublasLt", "algorithm": {"algo_id": 6, ...}},
                  "candidates": [{"name": "cublasLt", "ms": 0.011}, ...],
                  "policy_hash": "...", "environment": "<fingerprint hash>"}]}

The hash makes an edited file an error (:class:`LockfileTamperedError`) instead of a silently
different run; a file this release cannot read is a :class:`LockfileError` saying why. Only
plain msgspec and JSON here: the lockfile is read in training, inference and the CLI alike.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import Meta

from xpuruntime.policies.errors import XpuRuntimeError

if TYPE_CHECKING:
    from xpuruntime.policies.execution_policy import ExecutionPolicy

__all__ = [
    "LOCK_SCHEMA_VERSION",
    "Artifact",
    "Candidate",
    "Domain",
    "EntryChange",
    "LockDiff",
    "LockEntry",
    "LockedChoice",
    "Lockfile",
    "LockfileError",
    "LockfileTamperedError",
    "Signature",
    "diff_locks",
    "lock_json_schema",
    "served_policy_hash",
]

#: The lockfile layout this package reads and writes.
LOCK_SCHEMA_VERSION = 1

#: Who took a decision: the core dispatcher, the PyTorch extension, or an inference engine.
Domain: TypeAlias = Literal["core", "pytorch", "onnxruntime", "tensorrt", "openvino", "qnn"]
DOMAINS: tuple[Domain, ...] = ("core", "pytorch", "onnxruntime", "tensorrt", "openvino", "qnn")

#: (domain, op, shape, dtype, device, layout, model): what an entry is looked up by.
Signature: TypeAlias = tuple[str, str, str, str, str, str, str]

_SHA256 = r"^[0-9a-f]{64}$"


class LockfileError(XpuRuntimeError, ValueError):
    """A lockfile cannot be used: missing, not JSON, not a lockfile, or of a newer schema."""


class LockfileTamperedError(LockfileError):
    """A lockfile's content no longer matches its ``content_hash``: it was edited by hand
    or damaged. Record it again (``xpuruntime lock record``) instead of editing it."""


class Artifact(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A binary decision stored beside the lockfile (a timing cache, a compiled blob).

    ``file`` is relative to the lockfile's artifact folder (``<lock>.artifacts/``); the
    ``sha256`` is part of the lockfile's hash, so a swapped file is detected on use.
    """

    kind: Annotated[
        str, Meta(description="What the bytes are: 'tensorrt-timing-cache', 'openvino-blob'.")
    ]
    file: Annotated[str, Meta(description="File name in the lockfile's artifact folder.")]
    sha256: Annotated[str, Meta(pattern=_SHA256, description="SHA-256 of the file's bytes.")]
    bytes: Annotated[int, Meta(ge=0, description="Size of the file.")]


class LockedChoice(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What was chosen. Each domain fills what it decides; the rest stays empty."""

    kernel: Annotated[
        str | None, Meta(description="Kernel the dispatcher ran (cublasLt, cpu, ...).")
    ] = None
    algorithm: Annotated[
        dict[str, Any] | None,
        Meta(description="Library algorithm as its full configuration (cuBLASLt: algo_id, ...)."),
    ] = None
    backend: Annotated[
        str | None, Meta(description="Backend among a library's own (SDPA: flash_v2, math, ...).")
    ] = None
    options: Annotated[
        dict[str, Any],
        Meta(description="Engine or library options in effect (provider options, switches)."),
    ] = msgspec.field(default_factory=dict)
    artifact: Annotated[
        Artifact | None, Meta(description="Binary decision stored beside the lockfile.")
    ] = None


class Candidate(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """An alternative that was considered, with its measured time when it was timed."""

    name: str
    ms: Annotated[float | None, Meta(description="Measured milliseconds; None if not timed.")] = (
        None
    )
    algorithm: dict[str, Any] | None = None
    note: str = ""


class LockEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One decision: its signature, the choice, the alternatives, and where it was taken."""

    domain: Annotated[Domain, Meta(description="Who decided: core, pytorch or an engine.")]
    op: Annotated[str, Meta(description="The op, or 'session' for an engine's whole model.")]
    shape: Annotated[
        str, Meta(description="Shapes of the operands, as the domain prints them.")
    ] = ""
    dtype: str = ""
    device: str = ""
    layout: Annotated[
        str, Meta(description="What else selects the kernel (transposes, mask, causal ...).")
    ] = ""
    model: Annotated[
        str, Meta(description="SHA-256 of the model an engine entry belongs to; '' for ops.")
    ] = ""
    choice: LockedChoice
    candidates: list[Candidate] = msgspec.field(default_factory=list)
    mode: Annotated[str, Meta(description="Kernel-policy mode it was decided under.")] = ""
    strategy: str = ""
    reason: Annotated[str, Meta(description="Why this choice was taken.")] = ""
    policy_hash: Annotated[
        str | None, Meta(description="Hash of the policy it served (lock settings left out).")
    ] = None
    environment: Annotated[
        str, Meta(pattern=_SHA256, description="Key of the fingerprint in 'environments'.")
    ]

    @property
    def signature(self) -> Signature:
        """What the entry is looked up by (the environment is not part of it)."""
        return (
            self.domain,
            self.op,
            self.shape,
            self.dtype,
            self.device,
            self.layout,
            self.model,
        )

    def describe(self) -> str:
        """A one-line name for messages: ``core matmul float16 [64, 64, 64] on cuda:0``."""
        parts = [self.domain, self.op, self.dtype, self.shape]
        if self.layout:
            parts.append(f"({self.layout})")
        if self.model:
            parts.append(f"model {self.model[:12]}")
        text = " ".join(p for p in parts if p)
        return f"{text} on {self.device}" if self.device else text

    def chosen(self) -> str:
        """The choice in one word or phrase, for tables and messages."""
        choice = self.choice
        name = choice.kernel or choice.backend or ""
        if choice.algorithm is not None:
            algo = choice.algorithm.get("algo_id", "?")
            name = f"{name} algo {algo}" if name else f"algo {algo}"
        if choice.artifact is not None:
            name = f"{name} + {choice.artifact.kind}" if name else choice.artifact.kind
        if not name and choice.options:
            name = ", ".join(f"{k}={v}" for k, v in sorted(choice.options.items()))
        return name or "(nothing)"


class LockFileSchema(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Schema of a lockfile on disk (what the JSON Schema export describes)."""

    schema_version: Literal[1]
    content_hash: Annotated[
        str, Meta(pattern=_SHA256, description="SHA-256 of the canonical JSON of the rest.")
    ]
    environments: dict[str, dict[str, Any]]
    entries: list[LockEntry]
    schema_location: Annotated[
        str | None, Meta(description="JSON Schema of this file, for editors; ignored.")
    ] = msgspec.field(default=None, name="$schema")


def _sort_key(entry: LockEntry) -> tuple[str, ...]:
    return (*entry.signature, entry.environment)


class Lockfile:
    """The decisions of one or more runs, with the environments they were taken under.

    Immutable: :meth:`with_entries` returns a new lockfile. Entries are kept sorted by
    signature, so equal decisions always give byte-identical files and hashes.
    """

    __slots__ = ("_by_signature", "entries", "environments")

    def __init__(
        self,
        entries: Iterable[LockEntry] = (),
        environments: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        environments = dict(environments or {})
        unique: dict[tuple[str, ...], LockEntry] = {}
        for entry in entries:
            if entry.environment not in environments:
                raise LockfileError(
                    f"entry {entry.describe()} names environment {entry.environment[:12]}, which"
                    " the lockfile does not hold"
                )
            unique[_sort_key(entry)] = entry  # a later decision for the same key replaces it
        self.entries: tuple[LockEntry, ...] = tuple(unique[k] for k in sorted(unique))
        used = {entry.environment for entry in self.entries}
        self.environments: dict[str, dict[str, Any]] = {
            key: dict(value) for key, value in sorted(environments.items()) if key in used
        }
        by_signature: dict[Signature, list[LockEntry]] = {}
        for entry in self.entries:
            by_signature.setdefault(entry.signature, []).append(entry)
        self._by_signature = by_signature

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[LockEntry]:
        return iter(self.entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lockfile) and self.content_hash() == other.content_hash()

    def __hash__(self) -> int:
        return hash(self.content_hash())

    def __repr__(self) -> str:
        return (
            f"Lockfile({len(self.entries)} entries, {len(self.environments)} environments,"
            f" hash {self.content_hash()[:12]})"
        )

    def find(self, signature: Signature) -> list[LockEntry]:
        """The entries of ``signature``, one per environment it was recorded in."""
        return list(self._by_signature.get(signature, ()))

    def domain(self, domain: str) -> list[LockEntry]:
        """The entries one domain decided."""
        return [entry for entry in self.entries if entry.domain == domain]

    def with_entries(
        self, entries: Iterable[LockEntry], environment: Mapping[str, Any] | None = None
    ) -> Lockfile:
        """A copy with ``entries`` added; each replaces an entry of the same signature taken
        in the same environment. ``environment`` is the fingerprint the new entries name."""
        environments = dict(self.environments)
        if environment is not None:
            environments[environment_key(environment)] = dict(environment)
        return Lockfile([*self.entries, *entries], environments)

    def map_environments(self, change: Callable[[dict[str, Any]], Mapping[str, Any]]) -> Lockfile:
        """A copy with every environment fingerprint replaced by ``change(fingerprint)``
        (entries follow their fingerprint's new key): for tools that anonymise or retarget
        a lockfile, and for tests that need a lock "from another machine"."""
        keys: dict[str, str] = {}
        environments: dict[str, Mapping[str, Any]] = {}
        for key, fingerprint in self.environments.items():
            changed = change(json.loads(json.dumps(fingerprint)))
            keys[key] = environment_key(changed)
            environments[keys[key]] = changed
        entries = [msgspec.structs.replace(e, environment=keys[e.environment]) for e in self]
        return Lockfile(entries, environments)

    # -- plain data and identity ----------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        return {
            "schema_version": LOCK_SCHEMA_VERSION,
            "environments": self.environments,
            "entries": msgspec.to_builtins(list(self.entries)),
        }

    def content_hash(self) -> str:
        """SHA-256 of the canonical (sorted-key, compact) JSON of everything but the hash."""
        return hashlib.sha256(msgspec.json.encode(self._body(), order="sorted")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The document as plain data, ``content_hash`` included."""
        body = self._body()
        return {
            "schema_version": body["schema_version"],
            "content_hash": self.content_hash(),
            "environments": body["environments"],
            "entries": body["entries"],
        }

    def dumps(self) -> str:
        """The lockfile as JSON text (indented, keys in a stable order)."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<lockfile>") -> Lockfile:
        """Check plain data (as parsed from a file): schema, then the content hash."""
        if not isinstance(data, Mapping):
            raise LockfileError(
                f"{source}: a lockfile is a JSON object with schema_version, content_hash,"
                f" environments and entries; got {type(data).__name__}"
            )
        version = data.get("schema_version")
        if (
            isinstance(version, int)
            and not isinstance(version, bool)
            and version != LOCK_SCHEMA_VERSION
        ):
            hint = (
                "upgrade xpuruntime-policies"
                if version > LOCK_SCHEMA_VERSION
                else "record it again with this release"
            )
            raise LockfileError(
                f"{source}: lockfile schema_version {version} is not readable here (this"
                f" release reads {LOCK_SCHEMA_VERSION}); {hint}"
            )
        try:
            parsed = msgspec.convert(data, LockFileSchema)
        except msgspec.ValidationError as exc:
            raise LockfileError(
                f"{source}: not a valid lockfile: {exc}. Record it again with"
                " `xpuruntime lock record` (lockfiles are written by xpuruntime, not by hand)"
            ) from None
        lock = cls(parsed.entries, parsed.environments)
        if len(lock.entries) != len(parsed.entries):
            raise LockfileError(f"{source}: two entries have the same signature and environment")
        stored = parsed.content_hash
        actual = lock.content_hash()
        if stored != actual:
            raise LockfileTamperedError(
                f"{source}: content_hash {stored[:12]}... does not match the content"
                f" ({actual[:12]}...): the lockfile was edited or damaged after it was written."
                " Record it again (`xpuruntime lock record` or lock='record') rather than"
                " editing decisions by hand"
            )
        for key, fingerprint in lock.environments.items():
            if environment_key(fingerprint) != key:
                raise LockfileTamperedError(
                    f"{source}: environment {key[:12]} does not hash to its key: the lockfile"
                    " was edited. Record it again instead"
                )
        return lock

    @classmethod
    def loads(cls, text: str | bytes, *, source: str = "<lockfile>") -> Lockfile:
        """Parse JSON text and check it."""
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise LockfileError(
                f"{source}:{exc.lineno}:{exc.colno}: malformed JSON: {exc.msg}"
            ) from None
        except (ValueError, RecursionError) as exc:
            raise LockfileError(f"{source}: malformed JSON: {exc}") from None
        return cls.from_dict(data, source=source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Lockfile:
        """Read and check the lockfile at ``path``."""
        target = Path(path)
        try:
            raw = target.read_bytes()
        except FileNotFoundError:
            raise LockfileError(
                f"{target}: no such lockfile; record one first (ExecutionPolicy(lock='record',"
                " lock_file=...) or `xpuruntime lock record`)"
            ) from None
        except OSError as exc:
            raise LockfileError(f"{target}: cannot read: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LockfileError(f"{target}: not UTF-8 JSON text") from None
        return cls.loads(text, source=str(target))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (a reader never sees half a file); returns the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(self.dumps(), encoding="utf-8")
            tmp.replace(target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise LockfileError(f"{target}: cannot write: {exc.strerror or exc}") from None
        return target


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def environment_key(fingerprint: Mapping[str, Any]) -> str:
    """The key a fingerprint is stored under: SHA-256 of its canonical JSON (the same
    digest as ``xpuruntime.runtime.fingerprint.fingerprint_hash``)."""
    return hashlib.sha256(msgspec.json.encode(dict(fingerprint), order="sorted")).hexdigest()


def artifact_folder(lock_path: str | os.PathLike[str]) -> Path:
    """Where a lockfile's artifacts live: ``<lock>.artifacts/`` beside it."""
    path = Path(lock_path)
    return path.with_name(path.name + ".artifacts")


def served_policy_hash(policy: ExecutionPolicy) -> str:
    """The hash of the policy a decision served, with the lock settings left out, so that
    recording and replaying under the same policy give the same hash."""
    return policy.replace(lock="off", lock_file=None).content_hash()


# -- differences ----------------------------------------------------------------------------


class EntryChange(msgspec.Struct, frozen=True):
    """One signature whose decision differs between two lockfiles."""

    signature: Signature
    kind: Literal["added", "removed", "changed"]
    old: str = ""
    new: str = ""
    described: str = ""

    def __str__(self) -> str:
        if self.kind == "added":
            return f"+ {self.described}: {self.new}"
        if self.kind == "removed":
            return f"- {self.described}: {self.old}"
        return f"~ {self.described}: {self.old} -> {self.new}"


class LockDiff(msgspec.Struct, frozen=True):
    """The decisions that differ from lockfile ``a`` to ``b``; falsy when none do."""

    changes: tuple[EntryChange, ...]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __iter__(self) -> Iterator[EntryChange]:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __str__(self) -> str:
        return "\n".join(map(str, self.changes)) if self.changes else "no differences"


def _decision(entry: LockEntry) -> str:
    """The choice an entry makes, in one stable line (algorithm configurations included)."""
    text = entry.chosen()
    if entry.choice.algorithm is not None:
        config = json.dumps(entry.choice.algorithm, sort_keys=True, separators=(",", ":"))
        text = f"{text} {config}"
    if entry.choice.options and (entry.choice.kernel or entry.choice.backend):
        options = json.dumps(entry.choice.options, sort_keys=True, separators=(",", ":"))
        text = f"{text} {options}"
    if entry.choice.artifact is not None:
        text = f"{text} sha256 {entry.choice.artifact.sha256[:12]}"
    return text


def diff_locks(a: Lockfile, b: Lockfile) -> LockDiff:
    """Compare decisions signature by signature. Where a signature was recorded in several
    environments, each side is summarised by its set of choices."""
    changes: list[EntryChange] = []
    signatures = sorted({e.signature for e in a} | {e.signature for e in b})
    for signature in signatures:
        old = sorted({_decision(e) for e in a.find(signature)})
        new = sorted({_decision(e) for e in b.find(signature)})
        described = (a.find(signature) or b.find(signature))[0].describe()
        if not old:
            changes.append(
                EntryChange(signature, "added", new=" | ".join(new), described=described)
            )
        elif not new:
            changes.append(
                EntryChange(signature, "removed", old=" | ".join(old), described=described)
            )
        elif old != new:
            changes.append(
                EntryChange(
                    signature,
                    "changed",
                    old=" | ".join(old),
                    new=" | ".join(new),
                    described=described,
                )
            )
    return LockDiff(tuple(changes))


def lock_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a lockfile."""
    schema: dict[str, Any] = msgspec.json.schema(LockFileSchema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "xpuruntime decision lockfile",
        "description": "Decisions (kernels, algorithms, backends, engine options) keyed by op"
        " signature and environment fingerprint, replayed by ExecutionPolicy(lock='replay').",
        **schema,
    }
