"""The process-wide kernel policy for PyTorch training: set, scope, verify, record.

PyTorch's switches are process-global (one BLAS preference, one set of SDPA backends, one
TF32 mode per process), so the policy is too: setting it in one thread changes what every
thread runs. A lock serialises every change. Scopes (:func:`kernel_policy`) form a stack;
leaving a scope restores the state from before it, and a scope left out of order (threads
overlapping) hands its saved state to the scope entered after it, so once every scope has
closed the process is back where it started.

The policy comes in layers, as everywhere in xpuruntime: defaults < the policy objects
passed (or ``$XPURUNTIME_POLICY_FILE``) < ``XPURUNTIME_POLICY_*`` variables < ``op=kernel``
keyword arguments (:func:`xpuruntime.policies.layered_policy`); the record's
``policy_sources`` says which layer set each setting.

Each application is verified: every switch is read back after writing, and the
:class:`~xpuruntime.runtime.record.ExecutionRecord` (``kind="training"``) says what was
requested, what PyTorch reports, and whether it was honoured. A kernel PyTorch cannot honour
on the devices the training runs on goes through
:meth:`~xpuruntime.runtime.record.ExecutionRecord.kernel_fallback`, the rule inference
engines follow too: pinned under ``fallback="error"`` it raises
:class:`~xpuruntime.runtime.errors.UnsupportedOperationError` and leaves the previous state in
place; otherwise it is a recorded fallback. Anything else not honoured goes through
``record.fallback``.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    LayeredPolicy,
    PolicyDocument,
    PolicyError,
    layered_policy,
)
from xpuruntime.policies.conflicts import device_kind
from xpuruntime.pytorch._compat import is_compiling
from xpuruntime.pytorch.lock import apply_switch_lock
from xpuruntime.pytorch.mapping import Plan, PlannedSetting, plan
from xpuruntime.pytorch.switches import SWITCHES, read_all, torch_version, write_changed
from xpuruntime.runtime.fingerprint import environment_fingerprint, fingerprint_hash
from xpuruntime.runtime.record import (
    Choice,
    DecisionRecord,
    DecisionStatus,
    ExecutionRecord,
    FallbackMode,
    SettingRecord,
)

__all__ = [
    "clear_kernel_policy",
    "current_record",
    "fallback_mode",
    "get_execution_policy",
    "get_kernel_policy",
    "kernel_policy",
    "note_decision",
    "note_fallback",
    "note_kernel_fallback",
    "record_unapplicable",
    "requested_kernel",
    "set_kernel_policy",
]

PROCESS_GLOBAL_NOTE = (
    "PyTorch's switches are process-global: this policy applies to every thread of the process"
)

_LOCK = threading.RLock()


@dataclass
class _State:
    kernel_policy: KernelPolicy | None
    execution: ExecutionPolicy | None
    record: ExecutionRecord
    # Switch values from before any policy was applied; every application starts from them
    # so a new policy replaces the previous one instead of stacking on it.
    baseline: dict[str, Any] | None
    # Ops whose kernel entry PyTorch could not honour when the policy was set: already
    # through the fallback rule, PyTorch's default runs them.
    unapplied: frozenset[str] = frozenset()
    decided: set[tuple[str, ...]] = field(default_factory=set)


@dataclass
class _Scope:
    saved_state: _State
    saved_switches: dict[str, Any]


@functools.cache
def _environment() -> tuple[dict[str, Any], str]:
    fingerprint = environment_fingerprint()
    return fingerprint, fingerprint_hash(fingerprint)


def _empty_record() -> ExecutionRecord:
    return ExecutionRecord(kind="training", notes=[PROCESS_GLOBAL_NOTE])


_state = _State(kernel_policy=None, execution=None, record=_empty_record(), baseline=None)
_scopes: list[_Scope] = []


@dataclass(frozen=True)
class _Request:
    """What a set_kernel_policy() / kernel_policy() call asks for, after layering."""

    kernel: KernelPolicy | None
    execution: ExecutionPolicy | None
    # ExecutionPolicy fields to apply (None: all, as an ExecutionPolicy object asks).
    execution_settings: frozenset[str] | None
    layered: LayeredPolicy


_EXECUTION_PREFIX = "execution."


def _check_arguments(policy: object, execution: object, ops: dict[str, Any]) -> None:
    if policy is not None and not isinstance(policy, KernelPolicy):
        raise PolicyError(
            f"set_kernel_policy() takes a KernelPolicy (or op=kernel keywords), got "
            f"{type(policy).__name__}; pass an ExecutionPolicy as exec_policy=..."
        )
    if execution is not None and not isinstance(execution, ExecutionPolicy):
        raise PolicyError(f"exec_policy must be an ExecutionPolicy, got {type(execution).__name__}")
    if policy is not None and ops:
        raise PolicyError(
            f"pass either a KernelPolicy or op=kernel keywords, not both (got a policy and "
            f"{sorted(ops)})"
        )


def _request(
    policy: KernelPolicy | None, execution: ExecutionPolicy | None, ops: dict[str, Any]
) -> _Request:
    """The policy to apply: defaults < objects (or $XPURUNTIME_POLICY_FILE) < environment <
    keyword arguments."""
    _check_arguments(policy, execution, ops)
    base: PolicyDocument | None = None
    if policy is not None or execution is not None:
        kernel = policy if policy is not None else execution.kernel_policy if execution else None
        base = PolicyDocument(
            kernel=kernel,
            execution=execution.replace(kernel_policy=None) if execution is not None else None,
        )
    arguments = {"kernel": {"ops": KernelPolicy(**ops).to_section()["ops"]}} if ops else None
    layered = layered_policy(base, arguments=arguments, environ=os.environ)
    named = {
        path.removeprefix(_EXECUTION_PREFIX).split(".", 1)[0]
        for path in layered.sources
        if path.startswith(_EXECUTION_PREFIX)
    }
    effective = layered.policy
    if execution is None and not named:
        return _Request(effective.kernel_policy, None, frozenset(), layered)
    return _Request(
        effective.kernel_policy,
        effective,
        None if execution is not None else frozenset(named),
        layered,
    )


def _policy_fields(
    kernel: KernelPolicy | None, execution: ExecutionPolicy | None
) -> tuple[dict[str, Any], str | None]:
    if execution is not None:
        return execution.to_dict(), execution.content_hash()
    if kernel is not None:
        return {"kernel_policy": kernel.to_dict()}, kernel.content_hash()
    return {}, None


def _decided_devices(execution: ExecutionPolicy | None) -> frozenset[str]:
    """Device kinds training may run on: the policy's device, else what this machine has."""
    kind = device_kind(execution.device) if execution is not None else None
    if kind is not None:
        return frozenset({kind})
    return frozenset({"cpu", "cuda"}) if torch.cuda.is_available() else frozenset({"cpu"})


def _describe_missing(names: list[str]) -> str:
    return "; ".join(
        f"{name} is not available in PyTorch {torch_version()} (added in {SWITCHES[name].since})"
        for name in names
    )


def _verify(setting: PlannedSetting, refused: dict[str, str]) -> SettingRecord:
    missing = [name for name in setting.writes if not SWITCHES[name].available()]
    applied = {name: SWITCHES[name].read() for name in setting.writes if SWITCHES[name].available()}
    honoured = not missing and all(applied[name] == value for name, value in setting.writes.items())
    note = setting.note
    if missing:
        note = f"{note}; {_describe_missing(missing)}"
    refusals = [refused[name] for name in setting.writes if name in refused]
    if refusals:
        note = f"{note}; {'; '.join(refusals)}"
    elif not honoured and not missing:
        note = f"{note}; PyTorch reports {applied} after writing {setting.writes}"
    return SettingRecord(
        name=setting.name,
        requested=setting.requested,
        applied=applied or None,
        honoured=honoured,
        note=note,
    )


def _precision_choice(execution: ExecutionPolicy | None, settings: list[SettingRecord]) -> Choice:
    requested = execution.precision if execution is not None else None
    honoured = next((s.honoured for s in settings if s.name == "precision"), False)
    chosen = requested if honoured else None
    return Choice(requested=requested, chosen=chosen, reason="" if honoured else "not applied")


def _training_device() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    # Asking for the current device would initialise CUDA, after which set_allocator()
    # can no longer swap PyTorch's allocator: name the index only once CUDA is up.
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return f"cuda:{torch.cuda.current_device()}"
    return "cuda"


_DEFAULT_CHOICE = "PyTorch's default kernel"


def record_unapplicable(planned: Plan, record: ExecutionRecord, mode: FallbackMode) -> None:
    """Put the plan's entries PyTorch cannot honour through the fallback rules (kernel
    entries through ``record.kernel_fallback``, settings through ``record.fallback``)."""
    for entry in planned.unapplicable:
        if entry.mode is None:
            record.fallback(
                what=entry.name,
                requested=entry.requested,
                chosen="pytorch default",
                reason=entry.reason,
                mode=mode,
            )
        else:
            record.kernel_fallback(
                op=entry.name,
                kernel=entry.requested,
                entry_mode=entry.mode,
                chosen=_DEFAULT_CHOICE,
                reason=f"PyTorch cannot honour it: {entry.reason}",
                mode=mode,
            )


def _record_not_honoured(
    planned: Plan, settings: list[SettingRecord], record: ExecutionRecord, mode: FallbackMode
) -> None:
    for setting, result in zip(planned.settings, settings, strict=True):
        if result.honoured:
            continue
        if setting.mode is None:
            record.fallback(
                what=f"setting {result.name}",
                requested=str(result.requested),
                chosen=str(result.applied),
                reason=result.note,
                mode=mode,
            )
        else:
            record.kernel_fallback(
                op=setting.name,
                kernel=str(setting.requested),
                entry_mode=setting.mode,
                chosen=f"PyTorch with {result.applied}",
                reason=f"PyTorch did not honour it: {result.note}",
                mode=mode,
            )


def _apply(request: _Request, baseline: dict[str, Any]) -> tuple[ExecutionRecord, frozenset[str]]:
    """Write ``baseline`` + the plan, verify, and build the record; raises before recording."""
    kernel, execution = request.kernel, request.execution
    devices = _decided_devices(execution)
    planned: Plan = plan(kernel, execution, devices, request.execution_settings)
    mode: FallbackMode = (execution or ExecutionPolicy()).fallback
    fields, policy_hash = _policy_fields(kernel, execution)
    environment, environment_hash = _environment()
    record = ExecutionRecord(
        kind="training",
        policy=fields,
        policy_hash=policy_hash,
        policy_sources=dict(request.layered.sources),
        environment=environment,
        environment_hash=environment_hash,
        engine=Choice(requested="pytorch", chosen=f"pytorch {torch_version()}"),
        device=Choice(
            requested=execution.device if execution is not None else None,
            chosen=_training_device(),
            reason=f"kernel policy decided for {'/'.join(sorted(devices))}",
        ),
        notes=[PROCESS_GLOBAL_NOTE],
    )
    # Pins PyTorch cannot honour under fallback='error' raise here, before any switch moves.
    record_unapplicable(planned, record, mode)
    target = dict(baseline)
    for name, value in planned.writes().items():
        if SWITCHES[name].available():
            target[name] = value
    refused = write_changed(target)
    settings = [_verify(setting, refused) for setting in planned.settings]
    record.settings = settings
    record.precision = _precision_choice(execution, settings)
    _record_not_honoured(planned, settings, record, mode)
    apply_switch_lock(kernel, execution, planned.writes(), record)
    return record, frozenset(e.name for e in planned.unapplicable if e.mode is not None)


def _activate(request: _Request) -> ExecutionRecord:
    """Apply under the lock; on any error the switches are put back as they were."""
    global _state
    before = read_all()
    baseline = _state.baseline if _state.baseline is not None else before
    try:
        record, unapplied = _apply(request, baseline)
    except BaseException:
        write_changed(before)
        raise
    _state = _State(
        kernel_policy=request.kernel,
        execution=request.execution,
        record=record,
        baseline=baseline,
        unapplied=unapplied,
    )
    return record


def set_kernel_policy(
    policy: KernelPolicy | None = None,
    /,
    *,
    exec_policy: ExecutionPolicy | None = None,
    **ops: Any,
) -> ExecutionRecord:
    """Apply a kernel policy (and optionally an execution policy) to PyTorch, process-wide.

    ``set_kernel_policy(KernelPolicy(matmul="cublasLt"))`` or
    ``set_kernel_policy(matmul="cublasLt", attention="flash_v2")``. ``exec_policy`` adds
    precision (TF32), determinism, cuDNN benchmark, the device the kernels are decided for
    and the fallback mode. ``XPURUNTIME_POLICY_*`` variables override the objects and
    keywords override them (``record.policy_sources`` says which set what). With no
    arguments the policy is cleared. Returns the verified record of what PyTorch now runs
    with.
    """
    if policy is None and exec_policy is None and not ops:
        clear_kernel_policy()
        return current_record()
    request = _request(policy, exec_policy, ops)
    with _LOCK:
        return _activate(request)


def clear_kernel_policy() -> None:
    """Drop the policy and put PyTorch's switches back to their values before it."""
    global _state
    with _LOCK:
        if _state.baseline is not None:
            write_changed(_state.baseline)
        _state = _State(kernel_policy=None, execution=None, record=_empty_record(), baseline=None)


def get_kernel_policy() -> KernelPolicy | None:
    """The kernel policy in effect (the innermost scope's, or the one set), or None."""
    return _state.kernel_policy


def get_execution_policy() -> ExecutionPolicy | None:
    """The execution policy in effect, or None when only a kernel policy (or none) is set."""
    return _state.execution


def current_record() -> ExecutionRecord:
    """The record of the policy in effect; ops add their decisions and fallbacks to it."""
    return _state.record


def requested_kernel(op: str) -> tuple[str, str]:
    """(kernel, mode) the policy in effect asks of ``op`` where it runs; ("auto", "auto")
    when it names none, or when the entry could not be honoured at all when it was set.

    Ops ask on every call: the answer is cached per applied policy state (a new policy is a
    new state), except while dynamo traces, which must see the plain reads.
    """
    state = _state
    if is_compiling():
        return _requested_of(state, op)
    cached = _requested.get(op)
    if cached is not None and cached[0] is state:
        return cached[1]
    answer = _requested_of(state, op)
    _requested[op] = (state, answer)
    return answer


# op -> (the policy state it was read from, (kernel, mode)).
_requested: dict[str, tuple[_State, tuple[str, str]]] = {}


def _requested_of(state: _State, op: str) -> tuple[str, str]:
    kernel_policy = state.kernel_policy
    if kernel_policy is None or op in state.unapplied:
        return "auto", "auto"
    kernel = kernel_policy.get(op)
    if kernel is None or kernel == "auto":
        return "auto", "auto"
    return kernel, kernel_policy.mode(op) or "pin"


def fallback_mode() -> FallbackMode:
    """The fallback mode of the policy in effect (ExecutionPolicy's default when none)."""
    return (_state.execution or ExecutionPolicy()).fallback


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
    state = _state
    if key in state.decided:
        return
    with _LOCK:
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
    decided = _state.decided
    if key in decided:
        return True
    decided.add(key)
    return False


def note_kernel_fallback(
    *, op: str, kernel: str, entry_mode: str, chosen: str, reason: str
) -> None:
    """A kernel the policy names cannot run where an op runs: the kernel fallback rule
    (raise for a pin under fallback='error', else warn/record once per kind)."""
    mode = fallback_mode()
    key = ("kernel", op, kernel, chosen, reason)
    state = _state
    if key in state.decided:
        return  # the first occurrence raised, or was recorded
    with _LOCK:
        state.record.kernel_fallback(
            op=op, kernel=kernel, entry_mode=entry_mode, chosen=chosen, reason=reason, mode=mode
        )
        state.decided.add(key)


def note_fallback(*, what: str, requested: str, chosen: str, reason: str) -> None:
    """Apply the fallback mode to an op's fallback: raise, or warn/record once per kind."""
    mode = fallback_mode()
    key = ("fallback", what, requested, chosen, reason)
    state = _state
    if mode != "error" and key in state.decided:
        return
    with _LOCK:
        state.record.fallback(
            what=what, requested=requested, chosen=chosen, reason=reason, mode=mode
        )
        state.decided.add(key)


@contextmanager
def kernel_policy(
    policy: KernelPolicy | None = None,
    /,
    *,
    exec_policy: ExecutionPolicy | None = None,
    **ops: Any,
) -> Iterator[ExecutionRecord]:
    """Apply a policy for the ``with`` block, then restore what was in effect before.

    Same arguments as :func:`set_kernel_policy`; yields the verified record. The switches
    are process-global, so the block's policy is visible to other threads while it runs.
    """
    global _state
    empty = policy is None and exec_policy is None and not ops
    request = None if empty else _request(policy, exec_policy, ops)
    with _LOCK:
        scope = _Scope(saved_state=_state, saved_switches=read_all())
        if request is None:
            if _state.baseline is not None:
                write_changed(_state.baseline)
            _state = _State(None, None, _empty_record(), baseline=None)
            record = _state.record
        else:
            record = _activate(request)
        _scopes.append(scope)
    try:
        yield record
    finally:
        with _LOCK:
            index = next(i for i, entry in enumerate(_scopes) if entry is scope)
            if index == len(_scopes) - 1:
                write_changed(scope.saved_switches)
                _state = scope.saved_state
            else:
                # Left before a scope entered after it: that scope now owns the state to
                # restore, and the switches keep serving it until it closes.
                later = _scopes[index + 1]
                later.saved_state = scope.saved_state
                later.saved_switches = scope.saved_switches
            del _scopes[index]
