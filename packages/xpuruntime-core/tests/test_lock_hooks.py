"""Dispatcher lock hooks on the CPU: export, replay, and reported problems."""

from __future__ import annotations

import numpy as np

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import KernelPolicy


def _teardown() -> None:
    rt.dispatcher.set_lock("off")


def test_export_has_the_lockfile_fields() -> None:
    a = np.ones((3, 4), np.float32)
    ops.matmul(a, a.T)
    (entry,) = rt.dispatcher.export_decisions()
    assert entry["op"] == "matmul"
    assert entry["shape"] == [3, 4, 3]
    assert entry["layout"] == "NT"
    assert entry["kernel"] == "cpu"
    assert entry["mode"] == "auto"
    assert entry["strategy"] == "FirstSupported"
    assert entry["status"] == "decided"
    assert entry["algorithm"] is None
    assert entry["candidates"] == []


def test_best_performance_keeps_the_timed_candidates() -> None:
    a = np.ones((16, 16), np.float32)
    ops.matmul(a, a, policy=KernelPolicy(strategy="BestPerformance"))
    (entry,) = rt.dispatcher.export_decisions()
    assert [c["kernel"] for c in entry["candidates"]] == ["cpu"] or entry["candidates"] == []


def test_replay_resolves_to_the_locked_kernel() -> None:
    try:
        a = np.ones((3, 4), np.float32)
        ops.matmul(a, a.T)
        entries = rt.dispatcher.export_decisions()
        assert rt.dispatcher.set_lock("replay", entries) == []
        ops.matmul(a, a.T)
        decision = ops.last_decision()
        assert decision is not None
        assert decision.status == "locked"
        assert decision.kernel == "cpu"
        assert rt.dispatcher.lock_problems() == []
        assert rt.dispatcher.lock_mode() == "replay"
    finally:
        _teardown()


def test_missing_signature_falls_back_and_is_reported() -> None:
    try:
        rt.dispatcher.set_lock("replay", [])
        a = np.ones((2, 2), np.float64)
        np.testing.assert_allclose(ops.matmul(a, a), a @ a)
        decision = ops.last_decision()
        assert decision is not None
        assert decision.status == "fallen_back"
        assert "not in the lock" in decision.reason
        (problem,) = rt.dispatcher.lock_problems(take=True)
        assert problem["op"] == "matmul"
        assert problem["shape"] == [2, 2, 2]
        assert problem["reason"] == "not in the lock"
        assert rt.dispatcher.lock_problems() == []
    finally:
        _teardown()


def test_lock_entries_that_cannot_be_honoured_are_reported_at_once() -> None:
    try:
        entries = [
            {"op": "matmul", "shape": [2, 2, 2], "dtype": "float32", "device": "cpu",
             "layout": "NN", "kernel": "cublasLt"},
            {"op": "matmul", "shape": [2, 2, 2], "dtype": "float64", "device": "cpu",
             "layout": "NN", "kernel": "cpu", "algorithm": {"algo_id": 3}},
        ]  # fmt: skip
        problems = rt.dispatcher.set_lock("replay", entries)
        assert [p["kernel"] for p in problems] == ["cublasLt", "cpu"]
        assert "cannot run here" in problems[0]["reason"]
        assert "takes no algorithm" in problems[1]["reason"]
        a = np.ones((2, 2), np.float32)
        ops.matmul(a, a)
        decision = ops.last_decision()
        assert decision is not None
        assert decision.status == "fallen_back"
        assert decision.kernel == "cpu"
    finally:
        _teardown()


def test_malformed_lock_entries_are_typed_errors() -> None:
    import pytest

    with pytest.raises(rt.InvalidArgumentError, match="lacks 'kernel'"):
        rt.dispatcher.set_lock(
            "replay",
            [
                {
                    "op": "matmul",
                    "shape": [1, 1, 1],
                    "dtype": "float32",
                    "device": "cpu",
                    "layout": "",
                }
            ],
        )
    with pytest.raises(rt.InvalidArgumentError, match="malformed layout"):
        rt.dispatcher.set_lock(
            "replay",
            [
                {
                    "op": "matmul",
                    "shape": [1],
                    "dtype": "float32",
                    "device": "cpu",
                    "layout": "XX",
                    "kernel": "cpu",
                }
            ],
        )
    with pytest.raises(rt.InvalidArgumentError, match="lock mode"):
        rt.dispatcher.set_lock("sometimes")  # type: ignore[arg-type]
