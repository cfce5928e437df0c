"""A recording lock ends with the kernel_policy() scope that started it: the file is written
at scope exit, and calls after the scope (no policy) are not recorded into it."""

from __future__ import annotations

from pathlib import Path

import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.lock import Lockfile
from xpuruntime.pytorch.ops import fused_layernorm
from xpuruntime.runtime import lock as core_lock


def _layernorm(rows: int) -> None:
    fused_layernorm(torch.randn(rows, 32), (32,), torch.ones(32), torch.zeros(32))


def _layernorm_shapes(path: Path) -> set[str]:
    return {e.shape for e in Lockfile.load(path).domain("core") if e.op == "layernorm"}


def test_recording_stops_when_the_scope_ends(tmp_path: Path) -> None:
    path = tmp_path / "t.lock.json"
    policy = ExecutionPolicy(lock="record", lock_file=str(path))
    with xrt_torch.kernel_policy(exec_policy=policy, layernorm="xrt"):
        _layernorm(4)
    assert core_lock.active() is None
    assert _layernorm_shapes(path) == {"[4, 32]"}  # written at scope exit
    _layernorm(7)
    assert core_lock.active() is None
    assert _layernorm_shapes(path) == {"[4, 32]"}


def test_clearing_the_policy_ends_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "c.lock.json"
    xrt_torch.set_kernel_policy(
        exec_policy=ExecutionPolicy(lock="record", lock_file=str(path)), layernorm="xrt"
    )
    try:
        _layernorm(4)
    finally:
        xrt_torch.clear_kernel_policy()
    assert core_lock.active() is None
    _layernorm(9)
    assert _layernorm_shapes(path) == {"[4, 32]"}


def test_an_outer_lock_resumes_after_an_inner_policy_free_scope(tmp_path: Path) -> None:
    path = tmp_path / "o.lock.json"
    policy = ExecutionPolicy(lock="record", lock_file=str(path))
    with xrt_torch.kernel_policy(exec_policy=policy, layernorm="xrt"):
        _layernorm(4)
        with xrt_torch.kernel_policy():
            assert core_lock.active() is None
            _layernorm(5)
        assert core_lock.active() is not None
        _layernorm(6)
    assert _layernorm_shapes(path) == {"[4, 32]", "[6, 32]"}
