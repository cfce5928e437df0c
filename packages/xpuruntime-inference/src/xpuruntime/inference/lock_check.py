"""Which decisions of a lockfile would replay on this machine, and why the others would not.

Checked without running anything: the environment each entry was recorded in against this
one (GPU, libraries, the deciding package's version), whether the deciding engine or library
is here at all, whether the core still has the locked kernel and it can run the signature
here, and whether the artifacts (timing caches, blobs) are present and intact. What only a
run can tell (cuBLASLt accepting an algorithm configuration, TensorRT accepting a timing
cache) is checked when the lock is replayed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.policies.lock import LockEntry, Lockfile
from xpuruntime.runtime.lockstore import current_environment, environment_differences, lock_store

__all__ = ["replay_here"]


def _engine_missing(domain: str) -> str:
    from xpuruntime.inference.selection import availability_of
    from xpuruntime.runtime.engines import load_engine

    try:
        found = availability_of(load_engine(domain))
    except XpuRuntimeError as exc:
        return str(exc)
    return "" if found.available else f"{domain} is not available here: {found.reason}"


def _core_refusal(entry: LockEntry) -> str:
    from xpuruntime.runtime.dispatch import dispatcher

    kernel = entry.choice.kernel or ""
    try:
        ok, reason = dispatcher.supports(
            entry.op, kernel, json.loads(entry.shape), entry.dtype, entry.device, entry.layout
        )
    except XpuRuntimeError as exc:
        return str(exc)
    return "" if ok else f"the core cannot run {kernel!r} here: {reason}"


def _problem(entry: LockEntry, lock: Lockfile, path: Path | None) -> str:
    differences = environment_differences(
        entry, lock.environments[entry.environment], current_environment()
    )
    if differences:
        return "; ".join(differences)
    if entry.domain in ("onnxruntime", "tensorrt", "openvino", "qnn"):
        missing = _engine_missing(entry.domain)
        if missing:
            return missing
    elif entry.domain == "pytorch" and importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed here"
    elif entry.domain == "core":
        refusal = _core_refusal(entry)
        if refusal:
            return refusal
    if entry.choice.artifact is not None and path is not None:
        try:
            lock_store(path).read_artifact(entry.choice.artifact)
        except XpuRuntimeError as exc:
            return str(exc)
    return ""


def replay_here(lock: Lockfile, path: str | Path | None = None) -> dict[int, str]:
    """Index in ``lock.entries`` -> why that entry would not replay here (absent: it would).
    ``path`` (the lockfile's) lets artifacts be checked too."""
    where = Path(path) if path is not None else None
    problems = {}
    for index, entry in enumerate(lock.entries):
        problem = _problem(entry, lock, where)
        if problem:
            problems[index] = problem
    return problems
