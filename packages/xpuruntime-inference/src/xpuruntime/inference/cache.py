"""Content-addressed caches (TensorRT engines, ONNX Runtime optimized models, QNN contexts).

An entry is stored under the hash of its :class:`CacheKey`: the model's bytes, the policy
hash, the input shapes, the environment fingerprint hash and the engine version. Nothing is
looked up by file name or timestamp, so a stale entry can never be picked. When a lookup
misses, the explanation says why: the closest stored key's changed components ("model
changed", "environment changed"), or what was wrong with a damaged entry.

Safe under faults and concurrency:

* A writer fills a private staging folder and publishes it with one ``rename`` (atomic on
  POSIX), under a per-key lock (``filelock``) shared by every process using the folder;
  readers never see a half-written entry.
* ``key.json`` (the manifest) holds the key and the size and SHA-256 of every payload file;
  a lookup verifies them. A truncated, overwritten, emptied or missing file makes the entry
  *damaged*: it is discarded and the lookup is a miss that says why, so the caller rebuilds.
* A size bound (``XPURUNTIME_CACHE_MAX_SIZE``, default 20 GiB) is kept by evicting the least
  recently used entries after each publish. Entries used in the last minute are kept, so a
  session that has just verified an entry can still load it.
* A folder that cannot be used (read-only, not a folder) raises :class:`CacheError`;
  :func:`open_entry` turns that into a fallback recorded under the policy's mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from xpuruntime.inference.errors import CacheError
from xpuruntime.policies.bundle import file_sha256 as file_digest

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = [
    "CacheEntry",
    "CacheKey",
    "CacheLookup",
    "ContentCache",
    "all_entries",
    "cache_root",
    "clear",
    "default_cache_dir",
    "file_digest",
    "max_cache_bytes",
    "open_entry",
    "parse_size",
    "stable_digest",
    "verify_entry",
]

KEY_FILE = "key.json"
#: Where caches live when no folder is named: ``$XPURUNTIME_CACHE_DIR``, else the per-user
#: cache folder of the platform (``~/.cache/xpuruntime`` on Linux).
DIR_VARIABLE = "XPURUNTIME_CACHE_DIR"
#: Most bytes the entries of one cache folder may hold (``20GiB``, ``500M``, ``0`` = no bound).
SIZE_VARIABLE = "XPURUNTIME_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 20 * 2**30
#: ``cache_dir="default"`` in a policy means the per-user default folder.
DEFAULT_NAME = "default"
#: Entries used this recently are never evicted (a reader may be about to load them).
EVICTION_GRACE_S = 60.0
#: Staging folders older than this belong to writers that died; they are removed.
STALE_STAGING_S = 3600.0
_STAGING = ".staging-"
_TRASH = ".trash-"
_LOCKS = ".locks"
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def stable_digest(value: Any) -> str:
    """SHA-256 of a JSON-compatible value, independent of dict order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def default_cache_dir() -> Path:
    """``$XPURUNTIME_CACHE_DIR``, else the platform's per-user cache folder for xpuruntime."""
    configured = os.environ.get(DIR_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("xpuruntime", appauthor=False))


def cache_root(value: str | os.PathLike[str] | None) -> Path:
    """The folder a ``cache_dir`` setting names (None or ``"default"``: the default folder)."""
    if value is None or str(value) == DEFAULT_NAME:
        return default_cache_dir()
    return Path(value).expanduser()


def parse_size(text: str) -> int | None:
    """``"20GiB"``, ``"500M"``, ``"1048576"`` -> bytes; ``"0"``/``"none"`` -> None (no bound)."""
    if text.strip().lower() in ("none", "unbounded"):
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if match is None:
        raise CacheError(
            f"cannot read the cache size {text!r}: write bytes or a size such as 500M or 20GiB"
            f" (0 or 'none' for no bound)"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)]) or None


def max_cache_bytes() -> int | None:
    """The size bound from ``$XPURUNTIME_CACHE_MAX_SIZE`` (default 20 GiB; None: no bound)."""
    configured = os.environ.get(SIZE_VARIABLE)
    return DEFAULT_MAX_BYTES if configured is None else parse_size(configured)


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


class FileDigest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    size: int
    sha256: str


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``key.json``: the key and what every payload file must be."""

    key: CacheKey
    files: dict[str, FileDigest]
    created: float


def _short(value: str | None) -> str:
    if value is None:
        return "absent"
    return value[:12] if len(value) == 64 else value


@dataclass
class CacheLookup:
    """The result of a lookup.

    On a hit, ``entry`` is the verified entry folder to read. On a miss, ``entry`` is a
    private staging folder to write the payload into; :meth:`commit` then publishes it as
    ``path`` in one step (an uncommitted staging folder is removed when the lookup is
    garbage collected, or by :meth:`discard`). ``explanation`` says why it missed.
    """

    key: CacheKey
    entry: Path
    hit: bool
    explanation: str
    path: Path
    cache: ContentCache | None = field(default=None, repr=False)
    _cleanup: weakref.finalize[Any, Any] | None = field(default=None, repr=False)

    def commit(self, record: ExecutionRecord | None = None) -> bool:
        """Publish the staging folder as the entry; False when nothing was stored.

        Nothing stored (no payload, or the folder refused the write) is not an error: the
        session has what it built. With ``record``, ``record.cache[kind]["stored"]`` and
        ``["store_problem"]`` say what happened.
        """
        if self.hit or self.cache is None:
            return self.hit
        problem = ""
        try:
            stored = self.cache.publish(self.entry, self.path, self.key)
            if not stored:
                problem = "the engine wrote nothing to cache"
        except (OSError, CacheError) as exc:
            stored, problem = False, f"{type(exc).__name__}: {exc}"
        self.discard()
        if record is not None and self.key.kind in record.cache:
            entry = record.cache[self.key.kind]
            entry["stored"] = stored
            if problem:
                # The adapter's own reason (why it wrote nothing) says more than ours.
                entry.setdefault("store_problem", problem)
        return stored

    def invalidate(self, record: ExecutionRecord, reason: str) -> CacheLookup:
        """A hit whose entry the engine could not load: remove the entry and look up again
        (a miss to rebuild into), recorded as a miss with ``reason``."""
        cache = ContentCache(self.path.parent.parent, self.key.kind)
        with contextlib.suppress(OSError, CacheError), cache._lock(self.key.digest):
            _remove(self.path)
        lookup = cache.lookup(self.key)
        lookup.explanation = (
            f"miss: the stored entry failed to load ({reason}); it was discarded and rebuilt"
        )
        record.cache[self.key.kind] = lookup.as_record()
        return lookup

    def discard(self) -> None:
        """Drop an uncommitted staging folder (the build failed or was abandoned)."""
        if self._cleanup is not None:
            self._cleanup()

    def as_record(self) -> dict[str, Any]:
        """What goes into ``ExecutionRecord.cache[kind]``."""
        return {
            "key": self.key.digest,
            "hit": self.hit,
            "path": str(self.path),
            "explanation": self.explanation,
            "components": dict(self.key.components),
        }


@dataclass(frozen=True)
class CacheEntry:
    """One published entry, as ``xpuruntime cache list`` shows it."""

    kind: str
    path: Path
    key: CacheKey | None
    size: int
    last_used: float
    problem: str = ""


class ContentCache:
    """A folder of entries ``<root>/<kind>/<key digest>/``, each with its ``key.json``."""

    def __init__(
        self, root: str | os.PathLike[str] | None, kind: str, *, max_bytes: int | None = -1
    ) -> None:
        self.root = cache_root(root)
        self.folder = self.root / kind
        self.kind = kind
        self.max_bytes = max_cache_bytes() if max_bytes == -1 else max_bytes

    # -- lookup ---------------------------------------------------------------------------
    def lookup(self, key: CacheKey) -> CacheLookup:
        """A verified hit, or a miss with a staging folder and the reason it missed.

        Raises :class:`CacheError` when the folder cannot hold a new entry.
        """
        entry = self.folder / key.digest
        problem = verify_entry(entry, key)
        if problem is None:
            _touch(entry)
            return CacheLookup(key, entry, True, "hit: every key component matches", entry)
        if problem == _ABSENT:
            explanation = self._explain_miss(key)
        else:
            explanation = f"miss: the stored entry was damaged ({problem}); rebuilding"
            if not self._discard_damaged(entry, key):
                explanation += " (it could not be removed; the new build replaces it)"
        staging = self._staging(key)
        lookup = CacheLookup(key, staging, False, explanation, entry, self)
        lookup._cleanup = weakref.finalize(lookup, shutil.rmtree, staging, ignore_errors=True)
        return lookup

    def _staging(self, key: CacheKey) -> Path:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=f"{_STAGING}{key.digest[:16]}-", dir=self.folder))
        except OSError as exc:
            raise CacheError(
                f"the cache folder {self.root} cannot hold new entries: {exc.strerror or exc} "
                f"({type(exc).__name__}); point ExecutionPolicy.cache_dir (or "
                f"${DIR_VARIABLE}) at a writable folder, or unset cache_dir"
            ) from exc

    def _explain_miss(self, key: CacheKey) -> str:
        stored = [e.key for e in self.entries() if e.key is not None and not e.problem]
        if not stored:
            return f"miss: the {self.kind} cache at {self.folder} has no entry"
        closest = min(stored, key=lambda other: len(key.differences(other)))
        return "miss: " + "; ".join(key.differences(closest)) + " (compared with the closest entry)"

    def _discard_damaged(self, entry: Path, key: CacheKey) -> bool:
        try:
            with self._lock(key.digest):
                if verify_entry(entry, key) not in (None, _ABSENT):
                    _remove(entry)
            return True
        except (OSError, CacheError):
            return False

    # -- publish --------------------------------------------------------------------------
    def publish(self, staging: Path, entry: Path, key: CacheKey) -> bool:
        """Move a filled staging folder to ``entry`` atomically; keep the size bound."""
        files = _payload(staging)
        if not files:
            shutil.rmtree(staging, ignore_errors=True)
            return False
        manifest = Manifest(key, {name: _describe(staging / name) for name in files}, time.time())
        (staging / KEY_FILE).write_bytes(msgspec.json.encode(manifest))
        with self._lock(key.digest):
            if verify_entry(entry, key) is None:  # another process published it first
                shutil.rmtree(staging, ignore_errors=True)
            else:
                if entry.exists() or entry.is_symlink():
                    _remove(entry)
                os.rename(staging, entry)
        self.evict(keep=entry)
        return True

    # -- listing, eviction, clearing --------------------------------------------------------
    def entries(self) -> list[CacheEntry]:
        """The published entries of this kind (damaged ones with their problem)."""
        return list(_entries_of(self.folder))

    def evict(self, *, keep: Path | None = None) -> list[CacheEntry]:
        """Remove least recently used entries of the whole root until it fits the bound."""
        if self.max_bytes is None:
            return []
        removed = []
        with self._lock("evict"):
            entries = all_entries(self.root)
            total = sum(e.size for e in entries)
            now = time.time()
            for e in sorted(entries, key=lambda e: e.last_used):
                if total <= self.max_bytes:
                    break
                if e.path == keep or now - e.last_used < EVICTION_GRACE_S:
                    continue
                _remove(e.path)
                total -= e.size
                removed.append(e)
            _sweep_stale(self.root)
        return removed

    def _lock(self, name: str) -> Any:
        from filelock import FileLock

        locks = self.root / _LOCKS
        try:
            locks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"the cache folder {self.root} cannot be locked: {exc}") from exc
        return FileLock(str(locks / f"{self.kind}-{name}.lock"))


_ABSENT = "absent"


def verify_entry(entry: Path, key: CacheKey | None = None) -> str | None:
    """None when ``entry`` is complete and matches ``key``; else what is wrong with it."""
    manifest_file = entry / KEY_FILE
    if not entry.is_dir():
        return _ABSENT if not (entry.exists() or entry.is_symlink()) else "not a folder"
    try:
        manifest = msgspec.json.decode(manifest_file.read_bytes(), type=Manifest)
    except FileNotFoundError:
        return f"{KEY_FILE} is missing"
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"{KEY_FILE} is unreadable: {exc}"
    if key is not None and manifest.key != key:
        return f"{KEY_FILE} holds another key"
    for name, expected in manifest.files.items():
        path = entry / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != expected.size:
            return f"{name} has {size} bytes, {expected.size} were stored"
        if file_digest(path) != expected.sha256:
            return f"{name} does not match its SHA-256"
    return None


def all_entries(root: Path) -> list[CacheEntry]:
    """Every entry of every kind under ``root``."""
    if not root.is_dir():
        return []
    found: list[CacheEntry] = []
    for kind in sorted(root.iterdir()):
        if kind.is_dir() and not kind.name.startswith("."):
            found.extend(_entries_of(kind))
    return found


def clear(root: Path, kind: str | None = None) -> list[CacheEntry]:
    """Remove every entry (of ``kind`` only, if given) under ``root``; returns them."""
    removed = []
    for entry in all_entries(root):
        if kind is None or entry.kind == kind:
            _remove(entry.path)
            removed.append(entry)
    _sweep_stale(root, max_age_s=0.0 if kind is None else STALE_STAGING_S)
    return removed


def _entries_of(folder: Path) -> Iterator[CacheEntry]:
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        manifest_file = entry / KEY_FILE
        try:
            manifest = msgspec.json.decode(manifest_file.read_bytes(), type=Manifest)
            used = manifest_file.stat().st_mtime
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            yield CacheEntry(folder.name, entry, None, size, 0.0, f"{KEY_FILE}: {exc}")
            continue
        size = sum(f.size for f in manifest.files.values())
        yield CacheEntry(folder.name, entry, manifest.key, size, used)


def _payload(staging: Path) -> list[str]:
    return sorted(
        str(p.relative_to(staging))
        for p in staging.rglob("*")
        if p.is_file() and p.name != KEY_FILE
    )


def _describe(path: Path) -> FileDigest:
    return FileDigest(path.stat().st_size, file_digest(path))


def _touch(entry: Path) -> None:
    """Mark the entry used now (the LRU order); a read-only cache simply keeps its order."""
    with contextlib.suppress(OSError):
        os.utime(entry / KEY_FILE)


def _remove(path: Path) -> None:
    """Take ``path`` out of sight in one rename, then delete it."""
    trash = path.with_name(f"{_TRASH}{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _sweep_stale(root: Path, max_age_s: float = STALE_STAGING_S) -> None:
    """Remove staging folders of writers that died and leftovers of interrupted removals."""
    now = time.time()
    for leftover in [*root.glob(f"*/{_STAGING}*"), *root.glob(f"*/{_TRASH}*")]:
        try:
            old = now - leftover.stat().st_mtime >= max_age_s
        except OSError:
            continue
        if old or leftover.name.startswith(_TRASH):
            shutil.rmtree(leftover, ignore_errors=True)


def open_entry(
    cache_dir: str | os.PathLike[str] | None, key: CacheKey, decisions: Decisions
) -> CacheLookup | None:
    """Look ``key`` up for a session and write the result to ``record.cache[kind]``.

    An unusable cache folder is a fallback ("no cache") under the fallback rule: ``error``
    raises FallbackError, ``warn``/``allow`` record it and the session runs uncached.
    """
    record = decisions.record
    try:
        lookup = ContentCache(cache_dir, key.kind).lookup(key)
    except CacheError as exc:
        record.cache[key.kind] = {
            "key": key.digest,
            "hit": False,
            "path": str(cache_root(cache_dir)),
            "explanation": f"disabled: {exc}",
            "components": dict(key.components),
        }
        decisions.fallback(
            what=f"cache {key.kind}",
            requested=str(cache_root(cache_dir)),
            chosen="no cache",
            reason=str(exc),
        )
        return None
    record.cache[key.kind] = lookup.as_record()
    return lookup
