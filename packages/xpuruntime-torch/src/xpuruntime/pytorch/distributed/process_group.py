"""Apply a collective policy before torch.distributed starts NCCL, and record what NCCL did.

One policy per process: NCCL reads its settings when a communicator is created and its debug
settings once per process, so the policy is written into ``os.environ`` before the process
group exists (a running process group with other settings is refused), and NCCL's debug
log, one file per process, is read back into the record whenever the record is asked for.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import torch
import torch.distributed as dist

from xpuruntime.policies import CollectivePolicy, ExecutionPolicy, layered_policy
from xpuruntime.pytorch._state import get_execution_policy
from xpuruntime.pytorch.distributed.choices import decisions, judge
from xpuruntime.pytorch.distributed.nccl_log import (
    CollectiveChoice,
    DebugLog,
    LogMessage,
    SettingRead,
    expand_debug_file,
)
from xpuruntime.pytorch.distributed.nccl_settings import (
    POLICY_VARIABLES,
    READ_ONCE_VARIABLES,
    NcclSetting,
    debug_environment,
    nccl_settings,
)
from xpuruntime.pytorch.errors import CollectivePolicyError
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.fingerprint import environment_fingerprint, fingerprint_hash
from xpuruntime.runtime.record import Choice, ExecutionRecord, SettingRecord

__all__ = [
    "apply_collective_policy",
    "collective_record",
    "init_process_group",
    "nccl_version",
]

PolicyLike = ExecutionPolicy | CollectivePolicy | str | os.PathLike[str] | None

_LOGGER = logging.getLogger("xpuruntime.engine.nccl")
_LOG_LEVELS = {
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "verbose": logging.DEBUG,
}
_RANK_NOTE = (
    "NCCL logs each collective's algorithm and protocol on rank 0 of its communicator only;"
    " the other ranks' records hold the settings NCCL read and no per-collective entries"
)

_LOCK = threading.Lock()


@dataclass
class _Applied:
    """The policy in effect in this process and what has been read back so far."""

    decisions: Decisions
    settings: list[NcclSetting]
    log: DebugLog | None
    #: The read-once variables as this policy left them (what NCCL starts with under it).
    read_once: dict[str, str | None] = field(default_factory=dict)
    counts: Counter[CollectiveChoice] = field(default_factory=Counter)
    reads: dict[str, str] = field(default_factory=dict)
    fallen_back: set[CollectiveChoice | str] = field(default_factory=set)

    @property
    def policy(self) -> ExecutionPolicy:
        return self.decisions.policy

    @property
    def record(self) -> ExecutionRecord:
        return self.decisions.record


_applied: _Applied | None = None
# NCCL opens its debug file once per process, at its first log line: every later policy
# in this process reads the same file.
_debug_log: DebugLog | None = None
# The policy variables as they were before the first policy: a later policy that leaves a
# setting to NCCL puts the variable back (the previous policy's value must not linger).
_original: dict[str, str | None] | None = None
# The read-once variables NCCL started with, once it has run in this process.
_nccl_read_once: dict[str, str | None] | None = None


def nccl_version() -> tuple[int, ...] | None:
    """The NCCL version PyTorch links (None when this PyTorch has no NCCL)."""
    if not dist.is_available() or not dist.is_nccl_available():
        return None
    version = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    return tuple(version) if isinstance(version, tuple) else None


def apply_collective_policy(
    policy: PolicyLike = None,
    *,
    log_dir: str | os.PathLike[str] | None = None,
    verify: bool = True,
) -> ExecutionRecord:
    """Write the policy's NCCL settings into this process's environment, before NCCL starts.

    ``policy`` is an ExecutionPolicy (its ``collectives`` and ``fallback`` count), a
    CollectivePolicy, a policy file, or None (the process-wide policy of
    :func:`xpuruntime.pytorch.set_kernel_policy`, else the defaults); ``XPURUNTIME_POLICY_*``
    variables override it as everywhere. Call it before ``torch.distributed`` creates a
    process group, for example at the top of a script started by ``torchrun``;
    :func:`init_process_group` does both. With ``verify``, NCCL's debug output goes to a file
    per process in ``log_dir`` (a new temporary directory by default) and is read back by
    :func:`collective_record`.

    Raises :class:`~xpuruntime.pytorch.errors.CollectivePolicyError` when a process group
    already exists and the environment NCCL started with differs from the policy.
    """
    global _applied, _original, _nccl_read_once
    layered = layered_policy(_as_execution_policy(policy))
    execution = layered.policy
    settings = nccl_settings(execution.collectives, nccl_version=nccl_version())
    with _LOCK:
        if _original is None:
            _original = {name: os.environ.get(name) for name in POLICY_VARIABLES}
        wanted = {s.variable: s.value for s in settings}
        target = {name: wanted.get(name, _original[name]) for name in POLICY_VARIABLES}
        replaced: dict[str, str] = {}
        stale: dict[str, tuple[str | None, str | None]] = {}
        if dist.is_available() and dist.is_initialized():
            _refuse_if_different(settings)
            notes = [
                "the process group existed before the policy was applied; the environment it"
                " started with already held the policy's settings"
            ]
            log = _debug_log  # only if an earlier policy configured NCCL's debug output
        else:
            if _nccl_read_once is None and _applied is not None and _nccl_has_run(_applied):
                _nccl_read_once = _applied.read_once
            notes = []
            stale = _stale_read_once(target)
            trial = Decisions(execution, record=ExecutionRecord(kind="training"))
            if stale and trial.fallback_raises:  # raise before changing anything
                _record_stale(trial, stale)
            replaced = _write_environment(target)
            log = _configure_debug_log(log_dir) if verify else None
        if log is None:
            notes.append(
                "not verified: NCCL's debug output was not configured by xpuruntime, so what"
                " NCCL ran is not read back"
            )
        else:
            notes.append(f"NCCL's debug log for this process: {log.path}")
        notes += _environment_only_notes(settings)
        record = _base_record(execution, layered.sources, settings, replaced, notes)
        decided = Decisions(execution, record=record)
        _record_stale(decided, stale)
        _applied = _Applied(
            decisions=decided,
            settings=settings,
            log=log,
            read_once={name: target[name] for name in READ_ONCE_VARIABLES},
        )
    return collective_record()


def init_process_group(
    backend: str | None = None,
    *,
    policy: PolicyLike = None,
    log_dir: str | os.PathLike[str] | None = None,
    verify: bool = True,
    **kwargs: Any,
) -> ExecutionRecord:
    """``torch.distributed.init_process_group`` with a collective policy applied first.

    ``backend`` and ``kwargs`` go to PyTorch unchanged; ``policy``, ``log_dir`` and
    ``verify`` are those of :func:`apply_collective_policy`. Returns the record so far.
    """
    apply_collective_policy(policy, log_dir=log_dir, verify=verify)
    dist.init_process_group(backend, **kwargs)
    return collective_record()


def collective_record() -> ExecutionRecord:
    """The training record of the collective policy: the NCCL settings and, per distinct
    collective NCCL ran so far, the algorithm and protocol it used (``decisions``).

    A collective that did not run with the pinned algorithm or protocol goes through the
    policy's fallback mode here: ``error`` raises
    :class:`~xpuruntime.runtime.errors.FallbackError`, ``warn`` warns and records.
    """
    with _LOCK:
        if _applied is None:
            raise CollectivePolicyError(
                "no collective policy has been applied in this process; call"
                " xpuruntime.pytorch.distributed.init_process_group(policy=...) or"
                " apply_collective_policy(...) before creating the process group"
            )
        applied = _applied
        if applied.log is not None:
            _read_back(applied)
        return _current_record(applied)


# -- applying --------------------------------------------------------------------------------


def _as_execution_policy(policy: PolicyLike) -> ExecutionPolicy | str | Path | None:
    if isinstance(policy, CollectivePolicy):
        return ExecutionPolicy(collectives=policy)
    if isinstance(policy, ExecutionPolicy) or policy is None:
        if policy is None:
            return get_execution_policy()
        return policy
    if isinstance(policy, str | os.PathLike):
        return Path(policy)
    raise CollectivePolicyError(
        f"policy must be an ExecutionPolicy, a CollectivePolicy or a policy file path, got"
        f" {type(policy).__name__}"
    )


def _refuse_if_different(settings: list[NcclSetting]) -> None:
    differing = [
        f"{s.variable}={os.environ.get(s.variable)!r} (the policy sets {s.value!r})"
        for s in settings
        if os.environ.get(s.variable) != s.value
    ]
    if differing:
        raise CollectivePolicyError(
            "a torch.distributed process group already exists, and NCCL read its settings"
            f" when it started: {'; '.join(differing)}. Apply the policy before the process"
            " group is created (xpuruntime.pytorch.distributed.init_process_group(policy=...)"
            " instead of torch.distributed.init_process_group), or call"
            " torch.distributed.destroy_process_group() first"
        )


def _write_environment(target: dict[str, str | None]) -> dict[str, str]:
    """Set (or, for None, remove) each variable; return the user's values the policy replaced."""
    assert _original is not None
    replaced = {}
    for name, value in target.items():
        before = os.environ.get(name)
        # Only the user's own values count as replaced, not what an earlier policy wrote.
        if before is not None and value not in (None, before) and before == _original[name]:
            replaced[name] = before
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if replaced:
        _LOGGER.warning(
            "the collective policy replaces environment values: %s",
            ", ".join(f"{name}={value!r}" for name, value in replaced.items()),
        )
    return replaced


def _nccl_has_run(applied: _Applied) -> bool:
    """NCCL logged under ``applied``: it has read its once-per-process settings."""
    return applied.log is not None and applied.log.path.exists()


def _stale_read_once(target: dict[str, str | None]) -> dict[str, tuple[str | None, str | None]]:
    """Read-once variables whose wanted value differs from what NCCL started with."""
    if _nccl_read_once is None:
        return {}
    return {
        name: (target[name], _nccl_read_once[name])
        for name in READ_ONCE_VARIABLES
        if target[name] != _nccl_read_once[name]
    }


def _record_stale(decisions: Decisions, stale: dict[str, tuple[str | None, str | None]]) -> None:
    for name, (wanted, started) in stale.items():
        decisions.fallback(
            what=f"NCCL setting {name}",
            requested=str(wanted),
            chosen=str(started),
            reason="NCCL already ran in this process and reads this setting once per process"
            " (NCCL_ALGO and NCCL_PROTO it reads again for each communicator); start a new"
            " process for another value",
        )


def _configure_debug_log(log_dir: str | os.PathLike[str] | None) -> DebugLog:
    global _debug_log
    if _debug_log is not None:
        _debug_log.skip_existing()
        return _debug_log
    directory = (
        Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="xpuruntime-nccl-"))
    )
    directory.mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("RANK")
    # %p: a child process that starts NCCL with this environment writes its own file.
    name = f"nccl-rank{rank}.%p.log" if rank is not None else "nccl.%p.log"
    template = str(directory.resolve()).replace("%", "%%") + os.sep + name
    variables = debug_environment(os.environ, template)
    os.environ.update(variables)
    _debug_log = DebugLog(expand_debug_file(variables["NCCL_DEBUG_FILE"], pid=os.getpid()))
    _debug_log.skip_existing()
    return _debug_log


def _environment_only_notes(settings: list[NcclSetting]) -> list[str]:
    """Policy-free NCCL settings already in the environment: NCCL uses them too."""
    covered = {s.variable for s in settings}
    return [
        f"{name}={os.environ[name]!r} comes from the environment, not from the policy"
        for name in POLICY_VARIABLES
        if name not in covered and name in os.environ
    ]


def _base_record(
    policy: ExecutionPolicy,
    sources: dict[str, str],
    settings: list[NcclSetting],
    replaced: dict[str, str],
    notes: list[str],
) -> ExecutionRecord:
    environment = environment_fingerprint()
    version = nccl_version()
    entries = []
    for setting in settings:
        note = setting.note
        if setting.variable in replaced:
            note = f"{note}; " if note else ""
            note += (
                f"replaced {setting.variable}={replaced[setting.variable]!r} from the environment"
            )
        entries.append(
            SettingRecord(
                name=setting.setting,
                requested=setting.requested,
                applied=f"{setting.variable}={setting.value}",
                note=note,
            )
        )
    return ExecutionRecord(
        kind="training",
        policy=policy.to_dict(),
        policy_hash=policy.content_hash(),
        policy_sources=sources,
        environment=environment,
        environment_hash=fingerprint_hash(environment),
        engine=Choice(
            requested="torch.distributed",
            chosen=None,
            reason="NCCL " + ".".join(map(str, version)) if version else "PyTorch without NCCL",
        ),
        settings=entries,
        notes=notes,
    )


# -- reading back ----------------------------------------------------------------------------


def _read_back(applied: _Applied) -> None:
    assert applied.log is not None
    threshold = _LOG_LEVELS[applied.policy.engine_log_level]
    for entry in applied.log.read_new():
        if isinstance(entry, CollectiveChoice):
            applied.counts[entry] += 1
        elif isinstance(entry, SettingRead):
            applied.reads[entry.variable] = entry.value
        elif isinstance(entry, LogMessage):
            level = logging.WARNING if entry.level == "WARN" else logging.INFO
            if level >= threshold:
                _LOGGER.log(level, "NCCL: %s", entry.text)
    policy = applied.policy
    for setting in applied.settings:
        read = applied.reads.get(setting.variable)
        if (
            read is None
            or _same_value(read, setting.value)
            or setting.variable in applied.fallen_back
        ):
            continue
        applied.decisions.fallback(
            what=f"setting {setting.setting}",
            requested=f"{setting.variable}={setting.value}",
            chosen=f"{setting.variable}={read}",
            reason="NCCL read another value than xpuruntime set (the environment was changed"
            " after the policy was applied)",
        )
        applied.fallen_back.add(setting.variable)
    for choice in applied.counts:
        verdict = judge(choice, policy.collectives)
        if not verdict.fell_back or choice in applied.fallen_back:
            continue
        applied.decisions.fallback(
            what=f"NCCL {choice.collective} of {choice.nbytes} bytes",
            requested=verdict.requested,
            chosen=verdict.chosen,
            reason=verdict.reason,
        )
        applied.fallen_back.add(choice)


def _current_record(applied: _Applied) -> ExecutionRecord:
    record = applied.record
    backend = str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None
    settings = [_with_read_back(entry, applied.reads, backend) for entry in record.settings]
    notes = list(record.notes)
    engine: Choice | None = record.engine
    if backend is not None and backend != "nccl" and not applied.reads:
        notes.append(
            f"the collective policy is not applicable: the process group's backend is"
            f" {backend}, and only NCCL reads the NCCL settings; nothing of it was honoured"
        )
    if backend is not None:
        engine = Choice(
            requested="torch.distributed",
            chosen=f"torch.distributed {backend}",
            reason=record.engine.reason if record.engine else "",
        )
        notes.append(f"rank {dist.get_rank()} of {dist.get_world_size()}, backend {backend}")
        if dist.get_rank() != 0:
            notes.append(_RANK_NOTE)
    if applied.log is not None and not applied.log.path.exists():
        notes.append(
            f"NCCL has not written {applied.log.path} yet: no NCCL communicator has started in"
            " this process (another backend, or no collective yet), or NCCL's debug output"
            " was configured before this policy was applied"
        )
    return msgspec.structs.replace(
        record,
        engine=engine,
        settings=settings,
        decisions=decisions(applied.counts, applied.policy.collectives),
        fallbacks=list(record.fallbacks),
        notes=notes,
    )


def _with_read_back(
    entry: SettingRecord, reads: dict[str, str], backend: str | None
) -> SettingRecord:
    """The setting as NCCL reported reading it: honoured only on NCCL's word. Until NCCL
    reports it (or when the process group is not NCCL's) it is not claimed honoured."""
    variable, _, value = str(entry.applied).partition("=")
    read = reads.get(variable)
    if read is None:
        why = (
            f"not applicable: the process group's backend is {backend}, which does not read"
            f" {variable}"
            if backend is not None and backend != "nccl"
            else f"not verified: NCCL has not reported reading {variable} (no NCCL"
            " communicator has started in this process yet, or verify=False)"
        )
        return msgspec.structs.replace(
            entry, honoured=False, note=f"{entry.note}; {why}" if entry.note else why
        )
    honoured = _same_value(read, value)
    note = f"NCCL read {variable}={read}"
    if not honoured:
        note += f", not the {value!r} xpuruntime set"
    return msgspec.structs.replace(
        entry, honoured=honoured, note=f"{entry.note}; {note}" if entry.note else note
    )


def _same_value(read: str, written: str) -> bool:
    if re.fullmatch(r"-?\d+", read) and re.fullmatch(r"-?\d+", written):
        return int(read) == int(written)
    return read.lower() == written.lower()
