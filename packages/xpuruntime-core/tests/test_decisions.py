"""Decisions: the one place the policy's fallback mode is applied."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.execution_policy import Fallback
from xpuruntime.runtime import Decisions, FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning


def _decisions(mode: Fallback) -> Decisions:
    return Decisions(ExecutionPolicy(fallback=mode), record=ExecutionRecord(kind="training"))


def test_error_raises_and_records_nothing() -> None:
    decisions = _decisions("error")
    assert decisions.fallback_raises
    with pytest.raises(FallbackError, match="requested 'cuda:0'"):
        decisions.fallback(what="device", requested="cuda:0", chosen="cpu", reason="no GPU")
    assert decisions.record.fallbacks == []


def test_warn_warns_and_records_with_the_policy_mode() -> None:
    decisions = _decisions("warn")
    with pytest.warns(FallbackWarning, match="no GPU"):
        decisions.fallback(what="device", requested="cuda:0", chosen="cpu", reason="no GPU")
    [recorded] = decisions.record.fallbacks
    assert (recorded.mode, recorded.chosen) == ("warn", "cpu")


def test_allow_records_without_warning() -> None:
    decisions = _decisions("allow")
    assert not decisions.fallback_raises
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decisions.fallback(what="device", requested="cuda:0", chosen="cpu", reason="no GPU")
    assert [f.mode for f in decisions.record.fallbacks] == ["allow"]


def test_pinned_kernel_under_error_raises_but_a_preferred_one_falls_back() -> None:
    decisions = _decisions("error")
    with pytest.raises(UnsupportedOperationError, match="pins attention='flash'"):
        decisions.kernel_fallback(
            op="attention", kernel="flash", entry_mode="pin", chosen="math", reason="no GPU"
        )
    with pytest.warns(FallbackWarning):
        decisions.kernel_fallback(
            op="attention", kernel="flash", entry_mode="prefer", chosen="math", reason="no GPU"
        )
    [recorded] = decisions.record.fallbacks
    assert (recorded.what, recorded.mode) == ("kernel for attention", "warn")


def test_replay_fallback_names_the_lock(tmp_path: Path) -> None:
    policy = ExecutionPolicy(fallback="allow", lock="replay", lock_file=f"{tmp_path}/x.lock.json")
    decisions = Decisions.for_policy(policy, record=ExecutionRecord(kind="training"))
    assert decisions.lock is not None
    assert decisions.lock.path.name == "x.lock.json"
    decisions.replay_fallback(what="matmul", locked="cublaslt", chosen="cpu", reason="no GPU")
    [recorded] = decisions.record.fallbacks
    assert (recorded.what, recorded.requested) == ("lock: matmul", "cublaslt")
    assert (
        Decisions.for_policy(ExecutionPolicy(), record=ExecutionRecord(kind="training")).lock
        is None
    )
