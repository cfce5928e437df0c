"""The decision lockfile in the engine kit: one lock entry per engine session.

An engine session has one lock entry, keyed by (engine, device, precision, model digest):
the options it ran with and, where the engine has one, its tuning state (ONNX Runtime's
tunable-op results, TensorRT's timing cache, OpenVINO's compiled blob). :class:`EngineLock`
finds the locked entry (a missing or foreign one goes through the fallback mode), reports a
locked choice that could not be honoured, and writes the entry when recording. The kit's
pipeline drives it the same way for every engine (:mod:`xpuruntime.inference.kit.pipeline`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpuruntime.policies.lock import Candidate, LockedChoice, LockEntry, Signature
from xpuruntime.runtime.lockstore import LockStore, find_replayable, new_entry
from xpuruntime.runtime.record import DecisionRecord, DecisionStatus

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.policies.lock import Domain
    from xpuruntime.runtime.decisions import Decisions
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["EngineLock", "changed_options", "model_digest"]


@functools.lru_cache(maxsize=64)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    from xpuruntime.inference.cache import file_digest

    return file_digest(Path(path))


def model_digest(model: Path) -> str:
    """SHA-256 of the model file (cached while the file is unchanged)."""
    stat = model.stat()
    return _digest(str(model.resolve()), stat.st_mtime_ns, stat.st_size)


class EngineLock:
    """The lock entry of one engine session: look it up, honour or refuse it, or write it."""

    def __init__(
        self,
        store: LockStore,
        decisions: Decisions,
        domain: Domain,
        model: Path,
        device: str,
    ) -> None:
        self.store = store
        self.decisions = decisions
        self.domain = domain
        self.device = device
        self.signature: Signature = (
            domain,
            "session",
            "",
            decisions.policy.precision,
            device,
            "",
            model_digest(model),
        )
        self._entry: LockEntry | None = None
        self._looked_up = False

    @classmethod
    def open(
        cls, decisions: Decisions, domain: Domain, model: Path, device: str
    ) -> EngineLock | None:
        """The engine's lock when the policy records or replays, else None."""
        store = decisions.lock
        return None if store is None else cls(store, decisions, domain, model, device)

    @property
    def policy(self) -> ExecutionPolicy:
        return self.decisions.policy

    @property
    def record(self) -> ExecutionRecord:
        return self.decisions.record

    @property
    def replaying(self) -> bool:
        return self.policy.lock == "replay"

    @property
    def recording(self) -> bool:
        return self.policy.lock == "record"

    def describe(self) -> str:
        return f"{self.domain} session on {self.device} ({self.policy.precision})"

    def locked(self) -> LockEntry | None:
        """Replay: the entry to honour, or None after reporting why there is none."""
        if not self.replaying:
            return None
        if not self._looked_up:
            self._looked_up = True
            lock = self.store.read()
            found = find_replayable(lock, self.signature)
            if found.entry is None and not any(e.domain == self.domain for e in lock):
                # A lock holding none of this engine's decisions (a training lock, as a
                # bundle carries) pins nothing here: the engine decides, and that is recorded.
                why = f"{self.store.path.name} holds no {self.domain} decisions"
                self._decision(f"{self.domain}'s own choice", "decided", why)
            elif found.entry is None:
                self._fall_back("a locked entry", found.reason)
            else:
                self._entry = found.entry
                _note_policy(self.record, found.entry, self.policy)
        return self._entry

    def refuse(self, entry: LockEntry, reason: str) -> None:
        """Replay: ``entry`` cannot be honoured here; the engine decides anew."""
        self._fall_back(entry.chosen(), reason)
        self._entry = None

    def honoured(self, entry: LockEntry, how: str) -> None:
        """Replay: the engine runs exactly what ``entry`` locked."""
        self._decision(entry.chosen(), "locked", f"replayed from {self.store.path.name}: {how}")

    def save(
        self,
        choice: LockedChoice,
        *,
        reason: str,
        candidates: Sequence[Candidate] = (),
    ) -> LockEntry:
        """Record: write this session's decisions into the lockfile."""
        _, op, shape, dtype, device, layout, model = self.signature
        entry = new_entry(
            self.domain,
            op,
            choice,
            policy=self.policy,
            shape=shape,
            dtype=dtype,
            device=device,
            layout=layout,
            model=model,
            candidates=candidates,
            reason=reason,
        )
        self.store.record([entry])
        self._decision(entry.chosen(), "decided", f"recorded to {self.store.path.name}: {reason}")
        return entry

    def _fall_back(self, locked: str, reason: str) -> None:
        self.decisions.replay_fallback(
            what=self.describe(), locked=locked, chosen=f"{self.domain}'s own choice", reason=reason
        )
        self._decision(f"{self.domain}'s own choice", "fallen_back", reason)

    def _decision(self, kernel: str, status: DecisionStatus, reason: str) -> None:
        self.record.decisions.append(
            DecisionRecord(
                op="session",
                kernel=kernel,
                mode="lock",
                reason=reason,
                shape=self.signature[6][:12],
                dtype=self.policy.precision,
                device=self.device,
                status=status,
            )
        )


def _note_policy(record: ExecutionRecord, entry: LockEntry, policy: ExecutionPolicy) -> None:
    """Say so when a replayed entry was recorded under another policy (it is still used:
    the lock pins decisions, the policy's explicit settings are checked one by one)."""
    from xpuruntime.policies.lock import served_policy_hash

    served = served_policy_hash(policy)
    if entry.policy_hash not in (None, served):
        note = (
            f"lock: {entry.describe()} was recorded under policy {str(entry.policy_hash)[:12]},"
            f" this session's policy is {served[:12]}"
        )
        if note not in record.notes:
            record.notes.append(note)


def changed_options(locked: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """``name: locked -> effective`` for every locked option the session does not run with."""
    return [
        f"{name}: locked {value!r}, runs with {effective.get(name)!r}"
        for name, value in sorted(locked.items())
        if effective.get(name) != value
    ]
