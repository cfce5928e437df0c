"""One decision core: the policy, the record, the lockfile and the fallback rule together.

A :class:`Decisions` exists per inference session and per training scope. Everything that
decides (the core ops, the torch ops, the engines) asks it and reports to it; nothing else
reads ``ExecutionPolicy.fallback`` or passes a fallback mode to the record by hand, so the
rule ``error`` raises / ``warn`` warns and records / ``allow`` records is applied in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpuruntime.runtime.lockstore import policy_store

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.lockstore import LockStore
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["Decisions"]


class Decisions:
    """One per inference session and per training scope: owns the layered ExecutionPolicy,
    the ExecutionRecord, the lockfile store and the fallback rule."""

    __slots__ = ("_lock", "_policy", "_record")

    def __init__(
        self, policy: ExecutionPolicy, *, record: ExecutionRecord, lock: LockStore | None = None
    ) -> None:
        self._policy = policy
        self._record = record
        self._lock = lock

    @classmethod
    def for_policy(cls, policy: ExecutionPolicy, *, record: ExecutionRecord) -> Decisions:
        """Decisions under ``policy`` with the lockfile store its ``lock`` setting names."""
        return cls(policy, record=record, lock=policy_store(policy))

    def __repr__(self) -> str:
        return f"Decisions(fallback={self._policy.fallback!r}, lock={self._lock!r})"

    @property
    def policy(self) -> ExecutionPolicy:
        """The layered execution policy the decisions are taken under."""
        return self._policy

    @property
    def record(self) -> ExecutionRecord:
        """The execution record every decision and fallback goes into."""
        return self._record

    @property
    def lock(self) -> LockStore | None:
        """The lockfile store the policy records into or replays from (None: no lock)."""
        return self._lock

    @property
    def fallback_raises(self) -> bool:
        """Whether a fallback raises (``fallback="error"``): for a caller that must refuse
        before changing anything rather than after."""
        return self._policy.fallback == "error"

    def fallback(self, *, what: str, requested: str, chosen: str, reason: str) -> None:
        """Something runs elsewhere than requested: the policy's fallback mode decides
        (``error`` raises FallbackError, ``warn`` warns and records, ``allow`` records)."""
        self._record.fallback(
            what=what, requested=requested, chosen=chosen, reason=reason, mode=self._policy.fallback
        )

    def kernel_fallback(
        self, *, op: str, kernel: str, entry_mode: str, chosen: str, reason: str, hint: str = ""
    ) -> None:
        """A kernel the KernelPolicy names cannot run (pinned under ``error`` raises
        UnsupportedOperationError; otherwise a recorded fallback, see
        :meth:`ExecutionRecord.kernel_fallback`)."""
        self._record.kernel_fallback(
            op=op,
            kernel=kernel,
            entry_mode=entry_mode,
            chosen=chosen,
            reason=reason,
            mode=self._policy.fallback,
            hint=hint,
        )

    def replay_fallback(self, *, what: str, locked: str, chosen: str, reason: str) -> None:
        """A locked decision that cannot be replayed here goes through the fallback mode."""
        self.fallback(what=f"lock: {what}", requested=locked, chosen=chosen, reason=reason)
