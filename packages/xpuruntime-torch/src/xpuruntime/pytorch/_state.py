"""The kernel policy in effect in this process, and the decisions taken under it.

One :class:`~xpuruntime.runtime.decisions.Decisions` per applied policy (per
``set_kernel_policy`` call and per ``kernel_policy`` scope): the ops ask it which kernel the
policy requests, note what they ran, and send every fallback through it.
:mod:`xpuruntime.pytorch.policy` applies policies and swaps the state; this module only holds
and reads it, so the lockfile code and the ops can read it without importing the applier.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.pytorch._compat import is_compiling
from xpuruntime.pytorch.switches import torch_version
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.fingerprint import environment_fingerprint, fingerprint_hash
from xpuruntime.runtime.record import Choice, DecisionRecord, DecisionStatus, ExecutionRecord

__all__ = [
    "current_decisions",
    "current_record",
    "get_execution_policy",
    "get_kernel_policy",
    "note_decision",
    "note_fallback",
    "note_kernel_fallback",
    "requested_kernel",
]

PROCESS_GLOBAL_NOTE = (
    "PyTorch's switches are process-global: this policy applies to every thread of the process"
)
NO_POLICY_NOTE = "no kernel policy is set: PyTorch's own defaults decide every kernel"

LOCK = threading.RLock()
#: The policy in effect when none is set (its fallback mode is ExecutionPolicy's default).
DEFAULT_EXECUTION = ExecutionPolicy()


@dataclass(slots=True)
class State:
    kernel_policy: KernelPolicy | None
    execution: ExecutionPolicy | None
    decisions: Decisions
    # Switch -> its value before xpuruntime changed it, for every switch this state's policy
    # wrote: a new policy starts from these values (it replaces the previous one instead of
    # stacking on it), and clearing the policy writes them back. Switches no policy touched
    # are PyTorch's (or the user's) and are never read or written.
    baseline: dict[str, Any]
    # Ops whose kernel entry PyTorch could not honour when the policy was set: already
    # through the fallback rule, PyTorch's default runs them.
    unapplied: frozenset[str] = frozenset()
    decided: set[tuple[Any, ...]] = field(default_factory=set)

    @property
    def record(self) -> ExecutionRecord:
        return self.decisions.record


@functools.cache
def environment() -> tuple[dict[str, Any], str]:
    """This process's environment fingerprint and its hash (computed once)."""
    fingerprint = environment_fingerprint()
    return fingerprint, fingerprint_hash(fingerprint)


@functools.cache
def _has_cuda() -> bool:
    """Whether PyTorch sees a GPU (asked once: the answer does not change in a process)."""
    return torch.cuda.is_available()


def training_device() -> str:
    """The device training runs on, as far as it can be named without initialising CUDA."""
    if not _has_cuda():
        return "cpu"
    # Asking for the current device would initialise CUDA, after which set_allocator()
    # can no longer swap PyTorch's allocator: name the index only once CUDA is up.
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return f"cuda:{torch.cuda.current_device()}"
    return "cuda"


def _empty_decisions() -> Decisions:
    """The record when no policy is set: it says so, and still names the environment, the
    engine, the device and why no precision is set (built lazily: the fingerprint reads the
    installed packages)."""
    fingerprint, digest = environment()
    record = ExecutionRecord(
        kind="training",
        policy={},
        environment=fingerprint,
        environment_hash=digest,
        engine=Choice(requested=None, chosen=f"pytorch {torch_version()}", reason=NO_POLICY_NOTE),
        device=Choice(requested=None, chosen=training_device(), reason="no policy names one"),
        precision=Choice(
            requested=None,
            chosen=None,
            reason="no ExecutionPolicy: the tensors' dtypes and autocast decide",
        ),
        notes=[NO_POLICY_NOTE, PROCESS_GLOBAL_NOTE],
    )
    return Decisions(DEFAULT_EXECUTION, record=record)


_state: State | None = None


def current() -> State:
    """The state in effect (the no-policy state, made on first use)."""
    global _state
    state = _state
    if state is None:
        with LOCK:
            if _state is None:
                _state = no_policy()
            state = _state
    return state


def no_policy() -> State:
    """A state with no policy: PyTorch's defaults, nothing to restore."""
    return State(kernel_policy=None, execution=None, decisions=_empty_decisions(), baseline={})


def swap(state: State) -> State:
    """Make ``state`` the one in effect; returns it (callers hold ``LOCK``)."""
    global _state
    _state = state
    return state


def get_kernel_policy() -> KernelPolicy | None:
    """The kernel policy in effect (the innermost scope's, or the one set), or None."""
    return _state.kernel_policy if _state is not None else None


def get_execution_policy() -> ExecutionPolicy | None:
    """The execution policy in effect, or None when only a kernel policy (or none) is set."""
    return _state.execution if _state is not None else None


def current_decisions() -> Decisions:
    """The decisions of the policy in effect: its policy, record, lockfile and fallback rule."""
    return current().decisions


def current_record() -> ExecutionRecord:
    """The record of the policy in effect; ops add their decisions and fallbacks to it."""
    return current().decisions.record


def requested_kernel(op: str) -> tuple[str, str]:
    """(kernel, mode) the policy in effect asks of ``op`` where it runs; ("auto", "auto")
    when it names none, or when the entry could not be honoured at all when it was set.

    Ops ask on every call: the answer is cached per applied policy state (a new policy is a
    new state), except while dynamo traces, which must see the plain reads.
    """
    state = current()
    if is_compiling():
        return _requested_of(state, op)
    cached = _requested.get(op)
    if cached is not None and cached[0] is state:
        return cached[1]
    answer = _requested_of(state, op)
    _requested[op] = (state, answer)
    return answer


# op -> (the policy state it was read from, (kernel, mode)).
_requested: dict[str, tuple[State, tuple[str, str]]] = {}


def _requested_of(state: State, op: str) -> tuple[str, str]:
    kernel_policy = state.kernel_policy
    if kernel_policy is None or op in state.unapplied:
        return "auto", "auto"
    kernel = kernel_policy.get(op)
    if kernel is None or kernel == "auto":
        return "auto", "auto"
    return kernel, kernel_policy.mode(op) or "pin"


def note_decision(
    op: str,
    kernel: str,
    mode: str,
    reason: str,
    *,
    shape: str,
    dtype: str,
    device: str,
    status: DecisionStatus = "decided",
) -> None:
    """Record an op's kernel choice once per (op, kernel, shape, dtype, device, status)."""
    key = (op, kernel, mode, shape, dtype, device, status)
    state = current()
    if key in state.decided:
        return
    with LOCK:
        state.decided.add(key)
        state.record.decisions.append(
            DecisionRecord(
                op=op,
                kernel=kernel,
                mode=mode,
                reason=reason,
                shape=shape,
                dtype=dtype,
                device=device,
                status=status,
            )
        )


def already_noted(key: tuple[Any, ...]) -> bool:
    """True when ``key`` was noted under the policy in effect, else note it and return False.

    Ops call this with a cheap key (shapes as ``torch.Size``, dtype and device objects) to
    skip building a decision's strings on every repeat of a call they already recorded.
    """
    decided = current().decided
    if key in decided:
        return True
    decided.add(key)
    return False


def note_kernel_fallback(
    *, op: str, kernel: str, entry_mode: str, chosen: str, reason: str
) -> None:
    """A kernel the policy names cannot run where an op runs: the kernel fallback rule
    (raise for a pin under fallback='error', else warn/record once per kind)."""
    key = ("kernel", op, kernel, chosen, reason)
    state = current()
    if key in state.decided:
        return  # the first occurrence raised, or was recorded
    with LOCK:
        state.decisions.kernel_fallback(
            op=op, kernel=kernel, entry_mode=entry_mode, chosen=chosen, reason=reason
        )
        state.decided.add(key)


def note_fallback(*, what: str, requested: str, chosen: str, reason: str) -> None:
    """Apply the fallback mode to an op's fallback: raise, or warn/record once per kind."""
    key = ("fallback", what, requested, chosen, reason)
    state = current()
    if key in state.decided:
        return  # recorded already (under fallback='error' the first one raised)
    with LOCK:
        state.decisions.fallback(what=what, requested=requested, chosen=chosen, reason=reason)
        state.decided.add(key)
