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

Each application is verified: every switch the policy writes is read back after writing,
and the :class:`~xpuruntime.runtime.record.ExecutionRecord` (``kind="training"``) says what
was requested, what PyTorch reports, and whether it was honoured. Each applied policy has its
:class:`~xpuruntime.runtime.decisions.Decisions` (:func:`current_decisions`), which owns the
record and the fallback rule the inference engines follow too: a kernel PyTorch cannot honour
on the devices the training runs on, pinned under ``fallback="error"``, raises
:class:`~xpuruntime.runtime.errors.UnsupportedOperationError` and leaves the previous state in
place; otherwise it is a recorded fallback, as is anything else not honoured.

Applying a policy again with the environment unchanged costs a lookup: the layering and the
plan are cached on the arguments and the ``XPURUNTIME_POLICY_*`` variables, and only the
switches the policy touches are read, written and (on leaving a scope) restored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
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
from xpuruntime.policies.layering import FILE_VARIABLE, policy_variables
from xpuruntime.pytorch._state import (
    DEFAULT_EXECUTION,
    LOCK,
    PROCESS_GLOBAL_NOTE,
    State,
    already_noted,
    current,
    current_decisions,
    current_record,
    environment,
    get_execution_policy,
    get_kernel_policy,
    no_policy,
    note_decision,
    note_fallback,
    note_kernel_fallback,
    requested_kernel,
    swap,
    training_device,
)
from xpuruntime.pytorch.lock import apply_switch_lock, follow_state
from xpuruntime.pytorch.mapping import Plan, PlannedSetting, plan
from xpuruntime.pytorch.switches import SWITCHES, read, torch_version, write, write_changed
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.lockstore import LockStore, policy_store
from xpuruntime.runtime.record import (
    Choice,
    ExecutionRecord,
    SettingRecord,
)

__all__ = [
    "already_noted",
    "clear_kernel_policy",
    "current_decisions",
    "current_record",
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


@dataclass(slots=True)
class _Scope:
    saved_state: State
    # The values from before the scope of the switches it changed, written back on leaving
    # (under a lockfile: of every switch it touched, written back where they differ).
    saved_switches: dict[str, Any]
    compare: bool = False


_scopes: list[_Scope] = []


@dataclass(frozen=True)
class _Request:
    """What a set_kernel_policy() / kernel_policy() call asks for, after layering, with
    everything that does not depend on PyTorch's current switches worked out once."""

    kernel: KernelPolicy | None
    execution: ExecutionPolicy | None
    layered: LayeredPolicy
    devices: frozenset[str]
    planned: Plan
    policy_fields: dict[str, Any]
    policy_hash: str | None
    #: The policy decisions are taken under (the kernel policy inside the execution policy).
    policy: ExecutionPolicy
    #: planned.writes(), and the switches a lock may write on top.
    writes: dict[str, Any]
    #: (name, reader) of the switches of ``writes`` this PyTorch has: all a scope reads
    #: when no lock is involved and the policy in effect changed none but these.
    readers: tuple[tuple[str, Callable[[], Any]], ...]
    locked: frozenset[str]
    unapplied: frozenset[str]
    lock: LockStore | None
    device_requested: str | None
    device_reason: str


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


#: Requests already layered and planned, by what they depend on: the arguments (policy
#: objects by identity: they are frozen, and the entry keeps them alive), the
#: XPURUNTIME_POLICY_* variables and the policy file's stamp. A scope entered per training
#: step with an unchanged environment costs one lookup instead of layering and planning.
_requests: dict[tuple[Any, ...], tuple[KernelPolicy | None, ExecutionPolicy | None, _Request]] = {}
_REQUESTS_KEPT = 64


def _request(
    policy: KernelPolicy | None, execution: ExecutionPolicy | None, ops: dict[str, Any]
) -> _Request:
    """The policy to apply: defaults < objects (or $XPURUNTIME_POLICY_FILE) < environment <
    keyword arguments."""
    key = _request_key(policy, execution, ops)
    if key is not None:
        try:
            cached = _requests.get(key)
        except TypeError:  # an op=kernel keyword given as a mapping: layered every time
            cached, key = None, None
        if cached is not None and cached[0] is policy and cached[1] is execution:
            return cached[2]
    _check_arguments(policy, execution, ops)
    request = _layer(policy, execution, ops)
    if key is not None and _plan_is_pure(request.planned):
        if len(_requests) >= _REQUESTS_KEPT:
            _requests.clear()
        _requests[key] = (policy, execution, request)
    return request


def _request_key(
    policy: KernelPolicy | None, execution: ExecutionPolicy | None, ops: dict[str, Any]
) -> tuple[Any, ...] | None:
    variables = policy_variables(os.environ)
    stamp: tuple[int, int] | None = None
    if variables and policy is None and execution is None:
        file = dict(variables).get(FILE_VARIABLE)
        if file:
            try:
                stat = os.stat(file)
            except OSError:
                return None  # layering reports the missing file
            stamp = (stat.st_mtime_ns, stat.st_size)
    return (id(policy), id(execution), tuple(sorted(ops.items())), variables, stamp)


def _plan_is_pure(planned: Plan) -> bool:
    """Whether the plan was made without reading a switch (a plan that starts from the
    current SDPA priority order or CUBLAS_WORKSPACE_CONFIG is made again each time)."""
    return not any(
        name in setting.writes
        for setting in planned.settings
        for name in ("sdp.priority_order", "env.CUBLAS_WORKSPACE_CONFIG")
    )


def _layer(
    policy: KernelPolicy | None, execution: ExecutionPolicy | None, ops: dict[str, Any]
) -> _Request:
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
    kernel_policy = effective.kernel_policy
    applied: ExecutionPolicy | None = effective
    settings: frozenset[str] | None = None if execution is not None else frozenset(named)
    if execution is None and not named:
        applied, settings = None, frozenset()
    devices = _decided_devices(applied)
    fields, policy_hash = _policy_fields(kernel_policy, applied)
    planned = plan(kernel_policy, applied, devices, settings)
    available = [name for name in planned.writes() if name in _AVAILABLE]
    decided_under = applied if applied is not None else DEFAULT_EXECUTION
    if kernel_policy is not None and applied is not None:
        decided_under = applied.replace(kernel_policy=kernel_policy)
    return _Request(
        kernel=kernel_policy,
        execution=applied,
        layered=layered,
        devices=devices,
        planned=planned,
        policy_fields=fields,
        policy_hash=policy_hash,
        policy=decided_under,
        writes=planned.writes(),
        readers=tuple((name, SWITCHES[name].read) for name in available),
        locked=_locked(applied),
        unapplied=frozenset(e.name for e in planned.unapplicable if e.mode is not None),
        lock=policy_store(decided_under),
        device_requested=applied.device if applied is not None else None,
        device_reason=f"kernel policy decided for {'/'.join(sorted(devices))}",
    )


def _policy_fields(
    kernel: KernelPolicy | None, execution: ExecutionPolicy | None
) -> tuple[dict[str, Any], str | None]:
    if execution is not None:
        return execution.to_dict(), execution.content_hash()
    if kernel is not None:  # the same document form as an ExecutionPolicy's, kernel part only
        return kernel.to_dict(), kernel.content_hash()
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


def _verify(
    setting: PlannedSetting, refused: dict[str, str], after: dict[str, Any]
) -> SettingRecord:
    """The setting as PyTorch reports it: ``after`` holds every touched switch's value read
    after the writes (PyTorch's answer, not what was written)."""
    writes = setting.writes
    if not refused and _AVAILABLE.issuperset(writes):
        applied = {name: after[name] for name in writes}
        if applied == writes:  # the usual case, honoured, without building a note
            return SettingRecord(
                name=setting.name,
                requested=setting.requested,
                applied=applied or None,
                honoured=True,
                note=setting.note,
            )
    missing = [name for name in setting.writes if name not in _AVAILABLE]
    applied = {name: after[name] for name in setting.writes if name not in missing}
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


def _precision_choice(
    execution: ExecutionPolicy | None, settings: list[SettingRecord], devices: frozenset[str]
) -> Choice:
    if execution is None:
        return Choice(
            requested=None,
            chosen=None,
            reason="no ExecutionPolicy precision: the tensors' dtypes and autocast decide",
        )
    if "cuda" not in devices:
        return Choice(
            requested=execution.precision,
            chosen=None,
            reason="training runs on the CPU, where no PyTorch switch sets the precision"
            " (the TF32 switches act on CUDA only): the tensors' dtypes and"
            " xpuruntime.pytorch.autocast() decide",
        )
    honoured = next((s.honoured for s in settings if s.name == "precision"), False)
    chosen = execution.precision if honoured else None
    return Choice(
        requested=execution.precision,
        chosen=chosen,
        reason="" if honoured else "not applied (see the precision setting and fallbacks)",
    )


_DEFAULT_CHOICE = "PyTorch's default kernel"


def record_unapplicable(planned: Plan, decisions: Decisions) -> None:
    """Put the plan's entries PyTorch cannot honour through the fallback rules (kernel
    entries through ``kernel_fallback``, settings through ``fallback``)."""
    for entry in planned.unapplicable:
        if entry.mode is None:
            decisions.fallback(
                what=entry.name,
                requested=entry.requested,
                chosen="pytorch default",
                reason=entry.reason,
            )
        else:
            decisions.kernel_fallback(
                op=entry.name,
                kernel=entry.requested,
                entry_mode=entry.mode,
                chosen=_DEFAULT_CHOICE,
                reason=f"PyTorch cannot honour it: {entry.reason}",
            )


def _record_not_honoured(
    planned: Plan, settings: list[SettingRecord], decisions: Decisions
) -> None:
    for setting, result in zip(planned.settings, settings, strict=True):
        if result.honoured:
            continue
        if setting.mode is None:
            decisions.fallback(
                what=f"setting {result.name}",
                requested=str(result.requested),
                chosen=str(result.applied),
                reason=result.note,
            )
        else:
            decisions.kernel_fallback(
                op=setting.name,
                kernel=str(setting.requested),
                entry_mode=setting.mode,
                chosen=f"PyTorch with {result.applied}",
                reason=f"PyTorch did not honour it: {result.note}",
            )


def _new_decisions(request: _Request) -> Decisions:
    fingerprint, digest = environment()
    record = ExecutionRecord(
        kind="training",
        policy=dict(request.policy_fields),
        policy_hash=request.policy_hash,
        policy_sources=dict(request.layered.sources),
        environment=fingerprint,
        environment_hash=digest,
        engine=Choice(requested="pytorch", chosen=_ENGINE),
        device=Choice(
            requested=request.device_requested,
            chosen=training_device(),
            reason=request.device_reason,
        ),
        notes=[PROCESS_GLOBAL_NOTE],
    )
    return Decisions(request.policy, record=record, lock=request.lock)


_ENGINE = f"pytorch {torch_version()}"


def _apply(
    request: _Request, state: State, before: dict[str, Any]
) -> tuple[Decisions, dict[str, Any], list[str]]:
    """Write the plan over the baseline of ``before``'s switches, verify, and build the
    decisions; raises before writing anything when a pin cannot be honoured."""
    execution, planned, writes = request.execution, request.planned, request.writes
    decisions = _new_decisions(request)
    # Pins PyTorch cannot honour under fallback='error' raise here, before any switch moves.
    if planned.unapplicable:
        record_unapplicable(planned, decisions)
    previous = state.baseline
    baseline = (
        {name: previous.get(name, value) for name, value in before.items()} if previous else before
    )
    refused: dict[str, str] = {}
    after = dict(before)
    changed = []
    for name, value in baseline.items():
        wanted = writes.get(name, value)
        if before[name] != wanted:
            write(name, wanted, refused)
            after[name] = read(name)  # PyTorch's answer, not what was written
            changed.append(name)
    settings = []
    honoured = True
    for setting in planned.settings:  # a loop, not comprehensions: this runs per scope
        result = _verify(setting, refused, after)
        settings.append(result)
        honoured = honoured and result.honoured
    record = decisions.record
    record.settings = settings
    record.precision = _precision_choice(execution, settings, request.devices)
    if not honoured:
        _record_not_honoured(planned, settings, decisions)
    apply_switch_lock(request.kernel, execution, writes, decisions)
    # The switches now differing from their baseline are the ones to restore on clearing.
    locked = request.locked
    if not locked and writes.keys() >= baseline.keys():  # every switch read is the plan's
        return decisions, baseline, changed
    kept = {name: value for name, value in baseline.items() if name in writes or name in locked}
    return decisions, kept, changed


def _locked(execution: ExecutionPolicy | None) -> frozenset[str]:
    """Switches a lock may write beyond the plan (replay writes the locked values)."""
    if execution is None or execution.lock == "off":
        return frozenset()
    return _AVAILABLE


_AVAILABLE = frozenset(name for name, switch in SWITCHES.items() if switch.available())


def _touched(request: _Request, state: State) -> list[str]:
    """The switches applying ``request`` over ``state`` may change: the plan's, the ones the
    state's policy changed (back to their baseline), and every one under a lock."""
    names = {*request.writes, *state.baseline, *request.locked}
    return [name for name in names if name in _AVAILABLE]


def _activate(request: _Request) -> tuple[ExecutionRecord, _Scope]:
    """Apply under the lock; on any error the switches are put back as they were. Returns
    the record, and what leaving a scope of it restores."""
    state = current()
    if not request.locked and request.writes.keys() >= state.baseline.keys():
        # Only the plan's switches can change (the usual case: no policy in effect, or the
        # same one applied again).
        before = {name: reader() for name, reader in request.readers}
    else:
        before = {name: read(name) for name in _touched(request, state)}
    try:
        decisions, baseline, changed = _apply(request, state, before)
    except BaseException:
        write_changed(before)
        raise
    swap(
        State(
            kernel_policy=request.kernel,
            execution=request.execution,
            decisions=decisions,
            baseline=baseline,
            unapplied=request.unapplied,
        )
    )
    if request.locked:  # a replayed lock writes switches beyond the plan
        return decisions.record, _Scope(state, before, compare=True)
    if len(changed) == len(before):  # the usual scope: it changed every switch it read
        return decisions.record, _Scope(state, before)
    return decisions.record, _Scope(state, {name: before[name] for name in changed})


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
    with LOCK:
        return _activate(request)[0]


def clear_kernel_policy() -> None:
    """Drop the policy and put PyTorch's switches back to their values before it."""
    with LOCK:
        write_changed(current().baseline)
        follow_state(swap(no_policy()))  # a fresh record; the cleared policy's lock ends


class _PolicyScope(AbstractContextManager[ExecutionRecord]):
    """The context manager :func:`kernel_policy` returns (a class, not a generator: a scope
    entered per training step must cost next to nothing)."""

    __slots__ = ("_request", "_scope")

    def __init__(self, request: _Request | None) -> None:
        self._request = request
        self._scope: _Scope | None = None

    def __enter__(self) -> ExecutionRecord:
        request = self._request
        with LOCK:
            if request is None:
                saved_state = current()
                saved_switches = {name: read(name) for name in saved_state.baseline}
                write_changed(saved_state.baseline, saved_switches)
                record = swap(no_policy()).record
                follow_state(current())  # the dispatcher's lock stops recording in here
                scope = _Scope(saved_state, saved_switches, compare=True)
            else:
                record, scope = _activate(request)
            self._scope = scope
            _scopes.append(scope)
        return record

    def __exit__(self, *exc: object) -> None:
        scope = self._scope
        assert scope is not None, "kernel_policy(): __exit__ without __enter__"
        with LOCK:
            if _scopes[-1] is scope:
                _scopes.pop()
                _restore(scope)
                follow_state(swap(scope.saved_state))  # a lock ends with its scope
                return
            # Left before a scope entered after it: that scope now owns the state to
            # restore (its own saved switches, and ours from further back), and the
            # switches keep serving it until it closes.
            index = next(i for i, entry in enumerate(_scopes) if entry is scope)
            later = _scopes[index + 1]
            later.saved_state = scope.saved_state
            later.saved_switches = {**later.saved_switches, **scope.saved_switches}
            later.compare = later.compare or scope.compare
            del _scopes[index]


def _restore(scope: _Scope) -> None:
    """Put back the switches the scope changed. Without a lockfile those are exactly the
    ones it wrote, so nothing is read again; a switch the block itself changed among the
    others stays as the block left it."""
    if scope.compare:
        write_changed(scope.saved_switches)
        return
    refused: dict[str, str] = {}
    for name, value in scope.saved_switches.items():
        write(name, value, refused)


def kernel_policy(
    policy: KernelPolicy | None = None,
    /,
    *,
    exec_policy: ExecutionPolicy | None = None,
    **ops: Any,
) -> AbstractContextManager[ExecutionRecord]:
    """Apply a policy for the ``with`` block, then restore what was in effect before.

    Same arguments as :func:`set_kernel_policy`; the ``with`` yields the verified record.
    The switches are process-global, so the block's policy is visible to other threads
    while it runs. Leaving the block restores the switches the policy touched.
    """
    empty = policy is None and exec_policy is None and not ops
    return _PolicyScope(None if empty else _request(policy, exec_policy, ops))
