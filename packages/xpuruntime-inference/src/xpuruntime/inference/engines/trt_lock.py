"""TensorRT's lockable decisions: the timing cache as the tactic lock, the tactics it chose.

Recording stores the builder's serialized timing cache (``ITimingCache.serialize``) as an
artifact of the lockfile, with the tactic each layer got (from the engine inspector) as the
readable part of the entry. Replaying builds with that timing cache,
``ignore_mismatch=False`` (TensorRT refuses a cache from another device or release) and,
where the builder has it, ``BuilderFlag.ERROR_ON_TIMING_CACHE_MISS`` (a layer the cache
does not cover fails the build instead of being timed); afterwards each layer's tactic is
compared with the locked one. Whatever fails goes through the fallback mode and the engine is
built as TensorRT decides. What a lock cannot pin: tactics of layers TensorRT does not time
(it chooses them by heuristics), and the engine across TensorRT releases (the plan itself is
version-specific; the lock refuses another release up front).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.kit.locking import EngineLock, changed_options
from xpuruntime.policies.lock import LockedChoice, LockEntry

if TYPE_CHECKING:
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = [
    "TIMING_CACHE",
    "layer_tactics",
    "locked_timing_cache",
    "recorded_choice",
    "replay_differences",
]

TIMING_CACHE = "tensorrt-timing-cache"


class TimingCacheRefused(Exception):
    """TensorRT would not build from the locked timing cache (internal: becomes a fallback)."""


def locked_timing_cache(lock: EngineLock, entry: LockEntry, folder: Path) -> Path | None:
    """Replay: the entry's timing cache written to ``folder`` (None after refusing it)."""
    artifact = entry.choice.artifact
    if artifact is None or artifact.kind != TIMING_CACHE:
        lock.refuse(entry, "the locked entry holds no TensorRT timing cache")
        return None
    path = folder / "locked.timing-cache"
    path.write_bytes(lock.store.read_artifact(artifact))
    return path


def scratch_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="xpuruntime-trt-lock-")


def layer_tactics(record: ExecutionRecord) -> dict[str, str]:
    """Tactic per layer, as the engine inspector reported them into ``record.nodes``."""
    return {node.name: node.kernel for node in record.nodes if node.kernel}


def recorded_choice(lock: EngineLock, trt: Any, timing_cache: bytes | None) -> LockedChoice:
    """Record: TensorRT's timing cache (an artifact of the lockfile) and each layer's tactic."""
    artifact = (
        lock.store.write_artifact(TIMING_CACHE, timing_cache, ".trt-timing")
        if timing_cache
        else None
    )
    return LockedChoice(
        kernel=f"tensorrt {trt.__version__}",
        options={"tactics": layer_tactics(lock.record)},
        artifact=artifact,
    )


def replay_differences(entry: LockEntry, record: ExecutionRecord) -> list[str]:
    """Replay: the layers whose tactic differs from the locked one (none reported: none)."""
    tactics = layer_tactics(record)
    if not tactics:
        return []
    locked = entry.choice.options.get("tactics") or {}
    differences = changed_options(locked, tactics)
    return ["tactics differ from the lock: " + "; ".join(differences[:8])] if differences else []
