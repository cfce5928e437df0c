"""One lockfile per process, shared by every domain that records into it or replays from it.

The core dispatcher, the PyTorch extension and the inference engines all reach the lockfile
named by ``ExecutionPolicy.lock_file`` through :func:`lock_store`, which hands out one
:class:`LockStore` per path. Recording merges new decisions into the file under an
inter-process ``flock`` (several processes, or ranks, may record into one lockfile) and
writes it atomically; replaying reads and checks it once per change of the file.

Whether a locked decision can be replayed here is decided by :func:`environment_differences`:
only what can change the decision counts (the GPU and compute capability of the entry's
device, the libraries that implement it, the version of the deciding package), not the
Python patch release or the OS kernel.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpuruntime.policies.lock import (
    Artifact,
    LockedChoice,
    LockEntry,
    Lockfile,
    LockfileError,
    LockfileTamperedError,
    Signature,
    artifact_folder,
    environment_key,
    served_policy_hash,
)
from xpuruntime.runtime.device import split_device

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.policies.lock import Candidate, Domain

__all__ = [
    "LockStore",
    "Replay",
    "current_environment",
    "environment_differences",
    "lock_store",
]

#: Packages whose version decides what a domain chooses ("engine upgraded").
DOMAIN_PACKAGES: dict[str, tuple[str, ...]] = {
    "core": ("xpuruntime-core",),
    "pytorch": ("torch",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13"),
    "openvino": ("openvino",),
}
#: Native libraries whose version decides a domain's GPU choices (the core calls cuBLAS(Lt)
#: itself; the other domains bring their own copies, covered by their package version).
DOMAIN_LIBRARIES: dict[str, tuple[str, ...]] = {
    "core": ("cuda_runtime", "cublas", "cublaslt"),
}


@functools.cache
def current_environment() -> dict[str, Any]:
    """This process's environment fingerprint (computed once)."""
    from xpuruntime.runtime.fingerprint import environment_fingerprint

    return environment_fingerprint()


def _gpu(fingerprint: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    gpus = fingerprint.get("gpus") or []
    return dict(gpus[index]) if index < len(gpus) else None


def _package(fingerprint: Mapping[str, Any], names: Sequence[str]) -> str | None:
    packages = fingerprint.get("packages") or {}
    found = [f"{name} {packages[name]}" for name in names if name in packages]
    return ", ".join(found) or None


def environment_differences(
    entry: LockEntry, locked: Mapping[str, Any], current: Mapping[str, Any]
) -> list[str]:
    """Why ``entry``, taken in environment ``locked``, cannot be trusted in ``current``
    (empty when nothing that decides it has changed)."""
    reasons = []
    packages = DOMAIN_PACKAGES.get(entry.domain, ())
    was, now = _package(locked, packages), _package(current, packages)
    if was != now:
        reasons.append(f"{entry.domain} changed: locked with {was or 'none'}, here {now or 'none'}")
    spec = split_device(entry.device)
    if spec is not None and spec.kind == "cuda":
        gpu_was, gpu_now = _gpu(locked, spec.ordinal), _gpu(current, spec.ordinal)
        if gpu_now is None:
            reasons.append(f"no GPU {entry.device} here (locked on {_gpu_name(gpu_was)})")
        elif gpu_was is None or (gpu_was.get("name"), gpu_was.get("compute_capability")) != (
            gpu_now.get("name"),
            gpu_now.get("compute_capability"),
        ):
            reasons.append(
                f"other GPU: locked on {_gpu_name(gpu_was)}, {entry.device} here is"
                f" {_gpu_name(gpu_now)}"
            )
        for library in DOMAIN_LIBRARIES.get(entry.domain, ()):
            if locked.get(library) != current.get(library):
                reasons.append(
                    f"{library} changed: locked with {locked.get(library) or 'none'},"
                    f" here {current.get(library) or 'none'}"
                )
    elif locked.get("machine") != current.get("machine"):
        reasons.append(
            f"other CPU architecture: locked on {locked.get('machine')},"
            f" here {current.get('machine')}"
        )
    return reasons


def _gpu_name(gpu: Mapping[str, Any] | None) -> str:
    if gpu is None:
        return "no GPU"
    return f"{gpu.get('name')} (sm {gpu.get('compute_capability')})"


class Replay:
    """The outcome of looking a signature up for replay: the entry to use, or why none."""

    __slots__ = ("entry", "reason")

    def __init__(self, entry: LockEntry | None, reason: str = "") -> None:
        self.entry = entry
        self.reason = reason

    def __bool__(self) -> bool:
        return self.entry is not None


def find_replayable(
    lock: Lockfile, signature: Signature, current: Mapping[str, Any] | None = None
) -> Replay:
    """The entry of ``signature`` recorded in an environment equivalent to ``current``."""
    here = current if current is not None else current_environment()
    found = lock.find(signature)
    if not found:
        return Replay(None, "this signature is not in the lockfile")
    refusals = []
    for entry in found:
        differences = environment_differences(entry, lock.environments[entry.environment], here)
        if not differences:
            return Replay(entry)
        refusals.append("; ".join(differences))
    return Replay(None, "locked in another environment: " + " | ".join(refusals))


class LockStore:
    """The lockfile at one path: cached reads for replay, merged atomic writes for record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._cached: tuple[tuple[int, int], Lockfile] | None = None

    def __repr__(self) -> str:
        return f"LockStore({str(self.path)!r})"

    def read(self) -> Lockfile:
        """The lockfile as on disk now (checked; re-read only when the file changed)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            raise LockfileError(
                f"{self.path}: no such lockfile; record one first (ExecutionPolicy("
                "lock='record', lock_file=...) or `xpuruntime lock record`)"
            ) from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._mutex:
            if self._cached is not None and self._cached[0] == stamp:
                return self._cached[1]
        lock = Lockfile.load(self.path)
        with self._mutex:
            self._cached = (stamp, lock)
        return lock

    def record(self, entries: Iterable[LockEntry]) -> Lockfile:
        """Merge ``entries`` (taken in this environment) into the file; returns the result."""
        new = list(entries)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._mutex, _exclusive(self.path.with_name(self.path.name + ".lock")):
            base = Lockfile.load(self.path) if self.path.exists() else Lockfile()
            merged = base.with_entries(new, current_environment())
            if merged.content_hash() != base.content_hash() or not self.path.exists():
                merged.save(self.path)
            self._cached = None
        return merged

    def write_artifact(self, kind: str, data: bytes, suffix: str) -> Artifact:
        """Store ``data`` in the artifact folder under its digest (written once)."""
        digest = hashlib.sha256(data).hexdigest()
        name = f"{digest}{suffix}"
        folder = artifact_folder(self.path)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        if not target.is_file():
            tmp = folder / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(target)
        return Artifact(kind=kind, file=name, sha256=digest, bytes=len(data))

    def read_artifact(self, artifact: Artifact) -> bytes:
        """The bytes of ``artifact``; LockfileTamperedError when they are not what was locked."""
        path = artifact_folder(self.path) / artifact.file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise LockfileError(
                f"{path}: the lockfile's {artifact.kind} is missing ({exc.strerror or exc});"
                " copy the artifact folder along with the lockfile"
            ) from None
        if hashlib.sha256(data).hexdigest() != artifact.sha256:
            raise LockfileTamperedError(
                f"{path}: the {artifact.kind} does not match the digest the lockfile holds;"
                " it was replaced or damaged. Record the lockfile again"
            )
        return data


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (processes recording into one lockfile
    take turns; the lock goes away with the process, so a crash leaves nothing stale)."""
    import fcntl

    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_stores: dict[Path, LockStore] = {}
#: The same stores by the text they were asked for (ops look the store up on every call).
_named: dict[str, LockStore] = {}
_stores_mutex = threading.Lock()


def lock_store(path: str | Path) -> LockStore:
    """The process's store for the lockfile at ``path``."""
    named = _named.get(str(path))  # absolute paths only: a relative one follows the cwd
    if named is not None:
        return named
    resolved = Path(path).expanduser().resolve()
    with _stores_mutex:
        store = _stores.get(resolved)
        if store is None:
            store = _stores[resolved] = LockStore(resolved)
        if Path(path).is_absolute():
            _named[str(path)] = store
        return store


def policy_store(policy: ExecutionPolicy) -> LockStore | None:
    """The store of ``policy.lock_file`` when the policy records or replays, else None."""
    if policy.lock == "off" or not policy.lock_file:
        return None
    return lock_store(policy.lock_file)


def new_entry(
    domain: Domain,
    op: str,
    choice: LockedChoice,
    *,
    policy: ExecutionPolicy | None,
    shape: str = "",
    dtype: str = "",
    device: str = "",
    layout: str = "",
    model: str = "",
    candidates: Sequence[Candidate] = (),
    mode: str = "",
    strategy: str = "",
    reason: str = "",
) -> LockEntry:
    """A lock entry taken in this environment under ``policy``."""
    return LockEntry(
        domain=domain,
        op=op,
        shape=shape,
        dtype=dtype,
        device=device,
        layout=layout,
        model=model,
        choice=choice,
        candidates=list(candidates),
        mode=mode,
        strategy=strategy,
        reason=reason,
        policy_hash=served_policy_hash(policy) if policy is not None else None,
        environment=environment_key(current_environment()),
    )
