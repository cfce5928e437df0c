"""Content-addressed caches (TensorRT engines, ONNX Runtime optimized models).

An entry is stored under the hash of its :class:`CacheKey`: the model's bytes, the policy
hash, the input shapes, the environment fingerprint hash and the engine version. Nothing is
looked up by file name or timestamp, so a stale entry can never be picked. When a lookup
misses, the closest stored key tells which component changed ("model changed", "environment
changed") — the question everybody asks when an engine rebuilds unexpectedly.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.policies.bundle import file_sha256 as file_digest

__all__ = ["CacheKey", "CacheLookup", "ContentCache", "file_digest", "stable_digest"]

KEY_FILE = "key.json"


def stable_digest(value: Any) -> str:
    """SHA-256 of a JSON-compatible value, independent of dict order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class CacheKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a cached artifact depends on, component by component."""

    kind: str
    components: dict[str, str]

    @property
    def digest(self) -> str:
        return stable_digest({"kind": self.kind, "components": self.components})

    def differences(self, other: CacheKey) -> list[str]:
        """Human-readable component changes from ``other`` to ``self``."""
        changes = []
        for name in sorted(set(self.components) | set(other.components)):
            before, after = other.components.get(name), self.components.get(name)
            if before != after:
                changes.append(f"{name} changed ({_short(before)} -> {_short(after)})")
        return changes


def _short(value: str | None) -> str:
    if value is None:
        return "absent"
    return value[:12] if len(value) == 64 else value


@dataclass(frozen=True)
class CacheLookup:
    """The result of a lookup: the entry's folder, whether it was there, and why not."""

    key: CacheKey
    entry: Path
    hit: bool
    explanation: str

    def commit(self) -> None:
        """Mark the entry complete once its payload files are written (key file last, so a
        crashed writer leaves no entry that looks valid)."""
        self.entry.mkdir(parents=True, exist_ok=True)
        tmp = self.entry / f".{KEY_FILE}.{os.getpid()}"
        tmp.write_bytes(msgspec.json.encode(self.key))
        tmp.replace(self.entry / KEY_FILE)

    def as_record(self) -> dict[str, Any]:
        """What goes into ``ExecutionRecord.cache[kind]``."""
        return {
            "key": self.key.digest,
            "hit": self.hit,
            "path": str(self.entry),
            "explanation": self.explanation,
            "components": dict(self.key.components),
        }


class ContentCache:
    """A folder of entries ``<root>/<kind>/<key digest>/`` each holding ``key.json``."""

    def __init__(self, root: Path | str, kind: str) -> None:
        self.folder = Path(root).expanduser() / kind
        self.kind = kind

    def lookup(self, key: CacheKey) -> CacheLookup:
        entry = self.folder / key.digest
        if (entry / KEY_FILE).is_file():
            return CacheLookup(key, entry, True, "hit: every key component matches")
        return CacheLookup(key, entry, False, self._explain_miss(key))

    def _explain_miss(self, key: CacheKey) -> str:
        stored = list(self._stored_keys())
        if not stored:
            return f"miss: the {self.kind} cache at {self.folder} is empty"
        closest = min(stored, key=lambda other: len(key.differences(other)))
        return "miss: " + "; ".join(key.differences(closest)) + " (compared with the closest entry)"

    def _stored_keys(self) -> list[CacheKey]:
        keys = []
        for key_file in self.folder.glob(f"*/{KEY_FILE}"):
            try:
                keys.append(msgspec.json.decode(key_file.read_bytes(), type=CacheKey))
            except (OSError, msgspec.DecodeError):
                continue  # a foreign or half-written file is not a usable entry
        return keys
