"""The core dispatcher under a decision lockfile: record then replay in fresh processes (CPU
kernels here, the cuBLASLt grid on a GPU), locks from another machine, missing signatures,
the environment comparison and the store's merging writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xpuruntime.ops as ops
from xpuruntime.policies import BestPerformance, ExecutionPolicy, KernelPolicy
from xpuruntime.policies.lock import LockedChoice, LockEntry, Lockfile
from xpuruntime.runtime import lock as core_lock
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.lockstore import (
    current_environment,
    environment_differences,
    lock_store,
    new_entry,
)
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning

WORK = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import xpuruntime.ops as ops
    from xpuruntime.policies import BestPerformance, ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime import lock as core_lock
    from xpuruntime.runtime.dispatch import dispatcher

    mode, lock, device = sys.argv[1:4]
    kernels = KernelPolicy(strategy=BestPerformance)
    policy = ExecutionPolicy(kernel_policy=kernels, lock=mode, lock_file=lock, fallback="error")
    shapes = [(8, 16, 4), (32, 8, 32), (64, 64, 64)]
    outputs = []
    with core_lock.use(policy):
        if device == "cpu":
            rng = np.random.default_rng(0)
            for m, k, n in shapes:
                a = rng.standard_normal((m, k)).astype(np.float32)
                b = rng.standard_normal((k, n)).astype(np.float32)
                outputs.append(float(ops.matmul(a, b, policy=kernels).sum()))
            x = rng.standard_normal((4, 32)).astype(np.float32)
            w, bias = np.ones(32, np.float32), np.zeros(32, np.float32)
            outputs.append(float(ops.layernorm(x, w, bias, policy=kernels).sum()))
        else:
            import torch
            torch.manual_seed(0)
            for m in (64, 512, 2048):
                for dtype in (torch.float16, torch.bfloat16):
                    a = torch.randn(m, m, device="cuda", dtype=dtype)
                    outputs.append(float(ops.matmul(a, a, policy=kernels).float().sum()))
        decisions = [
            [d["op"], d["dtype"], d["shape"], d["layout"], d["kernel"], d["algorithm"], d["status"]]
            for d in dispatcher.export_decisions()
        ]
    print(json.dumps({"outputs": outputs, "decisions": sorted(decisions, key=str)}))
    """
)


def _fresh_process(mode: str, lock: Path, device: str = "cpu") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", WORK, mode, str(lock), device],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _without_status(decisions: list[list[Any]]) -> list[list[Any]]:
    return [d[:-1] for d in decisions]


def test_record_then_replay_in_fresh_processes(tmp_path: Path) -> None:
    lock = tmp_path / "core.lock.json"
    recorded = _fresh_process("record", lock)
    assert {d[-1] for d in recorded["decisions"]} == {"decided"}
    entries = Lockfile.load(lock).domain("core")
    assert sorted(e.op for e in entries) == ["layernorm", "matmul", "matmul", "matmul"]
    assert all(e.strategy == "BestPerformance" and e.choice.kernel for e in entries)
    for _ in range(2):
        replayed = _fresh_process("replay", lock)
        assert _without_status(replayed["decisions"]) == _without_status(recorded["decisions"])
        assert {d[-1] for d in replayed["decisions"]} == {"locked"}
        assert replayed["outputs"] == recorded["outputs"]


def _policy(mode: str, lock: Path, fallback: str) -> ExecutionPolicy:
    return ExecutionPolicy(
        kernel_policy=KernelPolicy(strategy=BestPerformance),
        lock=mode,  # type: ignore[arg-type]
        lock_file=str(lock),
        fallback=fallback,  # type: ignore[arg-type]
    )


def _matmul(policy: ExecutionPolicy, record: ExecutionRecord | None = None) -> None:
    a = np.ones((4, 8), np.float32)
    with core_lock.use(policy, record):
        ops.matmul(a, a.T.copy(), policy=policy.kernel_policy)


def _as_other_machine(lock: Path) -> None:
    Lockfile.load(lock).map_environments(
        lambda fp: {**fp, "packages": {**fp["packages"], "xpuruntime-core": "0.0.1"}}
    ).save(lock)


@pytest.mark.parametrize("fallback", ["error", "warn", "allow"])
def test_lock_from_another_machine_goes_through_the_fallback(tmp_path: Path, fallback: str) -> None:
    lock = tmp_path / "lock.json"
    _matmul(_policy("record", lock, "error"))
    _as_other_machine(lock)
    record = ExecutionRecord(kind="training")
    policy = _policy("replay", lock, fallback)
    if fallback == "error":
        with pytest.raises(FallbackError, match="locked in another environment: core changed"):
            _matmul(policy, record)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _matmul(policy, record)
    (recorded,) = record.fallbacks
    assert recorded.mode == fallback
    assert "xpuruntime-core 0.0.1" in recorded.reason
    warned = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(warned) == (1 if fallback == "warn" else 0)


def test_signature_missing_from_the_lock_is_a_fallback(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _matmul(_policy("record", lock, "error"))
    record = ExecutionRecord(kind="training")
    with core_lock.use(_policy("replay", lock, "allow"), record):
        b = np.ones((3, 5), np.float32)
        ops.matmul(b, b.T.copy())
    assert any("not in the lock" in f.reason for f in record.fallbacks)


def _entry(device: str, domain: str = "core") -> LockEntry:
    return new_entry(
        domain,  # type: ignore[arg-type]
        "matmul",
        LockedChoice(kernel="cublasLt", algorithm={"algo_id": 6}),
        policy=None,
        shape="[64, 64, 64]",
        dtype="float16",
        device=device,
    )


H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0"}
BASE = {"machine": "x86_64", "cublaslt": "13.0.0", "packages": {"xpuruntime-core": "0.1.0"}}


def test_environment_differences_name_what_changed() -> None:
    gpu = _entry("cuda:0")
    h100 = {**BASE, "gpus": [H100]}
    assert environment_differences(gpu, h100, h100) == []
    assert environment_differences(gpu, h100, {**h100, "python": "3.12", "driver": "999"}) == []
    (other,) = environment_differences(gpu, h100, {**BASE, "gpus": [H200]})
    assert "other GPU: locked on NVIDIA H100 80GB HBM3 (sm 9.0)" in other
    (absent,) = environment_differences(gpu, h100, {**BASE, "gpus": []})
    assert "no GPU cuda:0 here" in absent
    (library,) = environment_differences(gpu, h100, {**h100, "cublaslt": "13.1.0"})
    assert "cublaslt changed" in library
    cpu = _entry("cpu")
    assert environment_differences(cpu, h100, {**BASE, "gpus": [H200]}) == []
    (arch,) = environment_differences(cpu, BASE, {**BASE, "machine": "aarch64"})
    assert "other CPU architecture" in arch


def test_store_merges_records_of_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.lock.json"
    script = textwrap.dedent(
        """
        import sys
        from xpuruntime.policies.lock import LockedChoice
        from xpuruntime.runtime.lockstore import lock_store, new_entry
        entries = [
            new_entry("core", "matmul", LockedChoice(kernel="cpu"), policy=None,
                      shape=f"[{sys.argv[2]}, {i}, 1]", dtype="float32", device="cpu")
            for i in range(20)
        ]
        for entry in entries:
            lock_store(sys.argv[1]).record([entry])
        """
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", script, str(path), str(n)]) for n in range(4)
    ]
    assert [w.wait() for w in workers] == [0, 0, 0, 0]
    assert len(Lockfile.load(path)) == 80
    assert lock_store(path).read() == Lockfile.load(path)
    # The cuDNN a process loads depends on what it imported first (PyTorch brings its own):
    # the rest of the fingerprint is the machine's.
    here = {k: v for k, v in current_environment().items() if k != "cudnn"}
    stored = Lockfile.load(path).environments.popitem()[1]
    assert here == {k: v for k, v in stored.items() if k != "cudnn"}


def _gpu_skip_reason() -> str | None:
    if core().cuda_device_count() > 0:
        return None
    return f"needs an NVIDIA GPU and a CUDA build of xpuruntime-core: {core().cuda_unavailable_reason()}"


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=_gpu_skip_reason() or "")
def test_cublaslt_grid_replays_identical_algorithms_in_three_processes(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the GPU grid makes its tensors with PyTorch")
    lock = tmp_path / "gpu.lock.json"
    recorded = _fresh_process("record", lock, "cuda")
    algorithms = [d for d in recorded["decisions"] if d[4] == "cublasLt"]
    assert algorithms, recorded["decisions"]
    assert all(d[5] and "algo_id" in d[5] for d in algorithms)
    for _ in range(3):
        replayed = _fresh_process("replay", lock, "cuda")
        assert _without_status(replayed["decisions"]) == _without_status(recorded["decisions"])
        assert {d[-1] for d in replayed["decisions"]} == {"locked"}
