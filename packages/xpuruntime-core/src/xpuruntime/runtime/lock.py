"""The decision lockfile for the core dispatcher's ops (matmul/linear, layernorm, attention).

``CoreLock`` connects an :class:`~xpuruntime.policies.ExecutionPolicy` with ``lock="record"``
or ``"replay"`` to the native dispatcher:

* record: the dispatcher decides as usual (timing candidates under BestPerformance); every
  decision, with the cuBLASLt algorithm as its full configuration and the timed candidates,
  is written to the lockfile by :meth:`CoreLock.flush` (called on leaving :func:`use`, and at
  exit for a lock left active);
* replay: the entries recorded in an equivalent environment are handed to the dispatcher,
  which resolves those signatures to exactly the locked kernel and rebuilds the locked
  algorithm (nothing is timed). A locked choice the dispatcher cannot honour here, a
  signature recorded only in another environment and a signature missing from the lock are
  decided afresh (status ``fallen_back``) and go through the policy's fallback mode with the
  reason: choices refused up front when the lock is handed over, the others when the lock is
  checked (:meth:`CoreLock.check`, on leaving :func:`use`, on :meth:`CoreLock.flush`, at
  exit). The native op path reports no per-call status, so ``fallback="error"`` raises there,
  after the op ran with the dispatcher's own choice.

One lock is active per process (the dispatcher is process-wide)::

    policy = ExecutionPolicy(lock="replay", lock_file="decisions.lock.json")
    with xpuruntime.runtime.lock.use(policy):
        xpuruntime.ops.matmul(a, b, policy=kernel_policy)
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from xpuruntime.policies.lock import Candidate, LockedChoice, LockEntry, Signature
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.lockstore import (
    LockStore,
    current_environment,
    environment_differences,
    lock_store,
    new_entry,
)
from xpuruntime.runtime.record import ExecutionRecord

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy

__all__ = ["CoreLock", "activate", "active", "deactivate", "use"]


def _shape_text(shape: Any) -> str:
    return json.dumps([int(d) for d in shape])


def _signature(data: Mapping[str, Any]) -> Signature:
    return (
        "core",
        str(data["op"]),
        _shape_text(data["shape"]),
        str(data["dtype"]),
        str(data["device"]),
        str(data.get("layout") or ""),
        "",
    )


def _candidate(data: Mapping[str, Any]) -> Candidate:
    if data.get("kernel"):
        return Candidate(name=str(data["kernel"]), ms=float(data["ms"]))
    rank = data.get("rank", -1)
    return Candidate(
        name=f"heuristic rank {rank}", ms=float(data["ms"]), algorithm=data.get("algorithm")
    )


def _native_entry(entry: LockEntry) -> dict[str, Any]:
    """A lock entry as the dispatcher's set_lock takes it."""
    return {
        "op": entry.op,
        "shape": json.loads(entry.shape),
        "dtype": entry.dtype,
        "device": entry.device,
        "layout": entry.layout,
        "kernel": entry.choice.kernel or "",
        "algorithm": entry.choice.algorithm,
    }


def _describe(data: Mapping[str, Any]) -> str:
    layout = f" ({data['layout']})" if data.get("layout") else ""
    return f"{data['op']} {data['dtype']} {_shape_text(data['shape'])}{layout} on {data['device']}"


class CoreLock:
    """The dispatcher's side of one policy's lockfile."""

    def __init__(self, policy: ExecutionPolicy, record: ExecutionRecord | None = None) -> None:
        if policy.lock == "off" or policy.lock_file is None:
            raise ValueError("CoreLock needs a policy with lock='record' or 'replay'")
        self.mode = policy.lock
        self.store: LockStore = lock_store(policy.lock_file)
        self.decisions = Decisions(
            policy,
            record=record if record is not None else ExecutionRecord(kind="training"),
            lock=self.store,
        )
        # Signatures locked only in other environments: why each was not handed over.
        self._foreign: dict[Signature, str] = {}
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"CoreLock({self.mode!r}, {str(self.store.path)!r})"

    @property
    def policy(self) -> ExecutionPolicy:
        """The policy the lock runs under."""
        return self.decisions.policy

    @property
    def record(self) -> ExecutionRecord:
        """The record lock problems go into."""
        return self.decisions.record

    def follow(self, policy: ExecutionPolicy, record: ExecutionRecord | None) -> None:
        """Keep the lock, under a new policy of the same lockfile (and its record)."""
        self.decisions = Decisions(policy, record=record or self.record, lock=self.store)

    def start(self) -> None:
        """Put the dispatcher in this lock's mode (cached decisions are forgotten)."""
        if self.mode == "record":
            dispatcher.set_lock("record")
            return
        lock = self.store.read()
        here = current_environment()
        honourable: dict[Signature, LockEntry] = {}
        for entry in lock.domain("core"):
            differences = environment_differences(entry, lock.environments[entry.environment], here)
            if differences:
                self._foreign.setdefault(entry.signature, "; ".join(differences))
            else:
                honourable[entry.signature] = entry
        for signature in honourable:
            self._foreign.pop(signature, None)
        problems = dispatcher.set_lock("replay", [_native_entry(e) for e in honourable.values()])
        self._report(problems)

    def check(self) -> None:
        """Apply the fallback mode to every lock problem the dispatcher met since the last
        check (a locked choice not honoured, a signature missing from the lock)."""
        if self.mode == "replay":
            self._report(dispatcher.lock_problems(take=True))

    def _report(self, problems: list[dict[str, Any]]) -> None:
        for problem in problems:
            signature = _signature(problem)
            if signature in self._foreign:
                reason = f"locked in another environment: {self._foreign[signature]}"
            else:
                reason = str(problem.get("reason") or "this signature is not in the lockfile")
            self.decisions.replay_fallback(
                what=_describe(problem),
                locked=str(problem.get("kernel") or "a locked decision"),
                chosen="the dispatcher's own decision",
                reason=reason,
            )

    def entries(self) -> list[LockEntry]:
        """The dispatcher's decisions so far as lock entries (record mode)."""
        out = []
        for data in dispatcher.export_decisions():
            if data.get("status", "decided") != "decided":
                continue
            out.append(
                new_entry(
                    "core",
                    str(data["op"]),
                    LockedChoice(kernel=str(data["kernel"]), algorithm=data.get("algorithm")),
                    policy=self.policy,
                    shape=_shape_text(data["shape"]),
                    dtype=str(data["dtype"]),
                    device=str(data["device"]),
                    layout=str(data.get("layout") or ""),
                    candidates=[_candidate(c) for c in data.get("candidates") or []],
                    mode=str(data.get("mode", "")),
                    strategy=str(data.get("strategy", "")),
                    reason=str(data.get("reason", "")),
                )
            )
        return out

    def flush(self) -> int:
        """Record: write the decisions so far into the lockfile; returns how many.
        Replay: apply the fallback mode to the problems met so far; returns 0."""
        with self._mutex:
            if self.mode == "replay":
                self.check()
                return 0
            entries = self.entries()
            if entries:
                self.store.record(entries)
            return len(entries)

    def stop(self) -> None:
        """Flush, and put the dispatcher back to deciding without a lock."""
        try:
            self.flush()
        finally:
            dispatcher.set_lock("off")


_active: list[CoreLock] = []
_active_mutex = threading.Lock()


def active() -> CoreLock | None:
    """The lock the dispatcher runs under now, or None."""
    return _active[0] if _active else None


def activate(policy: ExecutionPolicy, record: ExecutionRecord | None = None) -> CoreLock | None:
    """Make ``policy``'s lock the dispatcher's (replacing any other); None when the policy
    has no lock (the dispatcher then decides without one)."""
    with _active_mutex:
        if _active:
            current = _active.pop()
            if (current.policy.lock, current.policy.lock_file) == (policy.lock, policy.lock_file):
                current.follow(policy, record)
                _active.append(current)
                return current
            current.stop()
        if policy.lock == "off" or policy.lock_file is None:
            return None
        lock = CoreLock(policy, record)
        lock.start()
        _active.append(lock)
        return lock


def deactivate() -> None:
    """Flush the active lock and leave the dispatcher without one."""
    with _active_mutex:
        if _active:
            _active.pop().stop()


@contextmanager
def use(
    policy: ExecutionPolicy, record: ExecutionRecord | None = None
) -> Iterator[CoreLock | None]:
    """The dispatcher under ``policy``'s lock for the block; flushed on leaving it."""
    lock = activate(policy, record)
    try:
        yield lock
    finally:
        if lock is not None and active() is lock:
            deactivate()


@atexit.register
def _flush_at_exit() -> None:
    lock = active()
    if lock is not None and lock.mode == "record":
        lock.flush()
