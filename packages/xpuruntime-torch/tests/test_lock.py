"""Decision lockfiles in PyTorch training: switches and SDPA backends per call signature,
recorded and replayed in fresh processes; locks PyTorch cannot honour; other machines."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.lock import Lockfile
from xpuruntime.pytorch.lock import sdpa_backend
from xpuruntime.pytorch.ops import fused_attention
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import FallbackWarning

STEP = textwrap.dedent(
    """
    import json, sys
    import torch
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.pytorch.ops import fused_attention

    mode, lock, device = sys.argv[1:4]
    xrt_torch.set_kernel_policy(
        exec_policy=ExecutionPolicy(lock=mode, lock_file=lock, fallback="error")
    )
    torch.manual_seed(0)
    if device == "cpu":
        q4 = torch.randn(2, 4, 16, 32)
        q3 = torch.randn(4, 16, 32)
        calls = [(q4, False, None), (q4, True, None), (q3, False, None)]
    else:
        half = torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.float16)
        wide = torch.randn(1, 4, 128, 256, device="cuda", dtype=torch.bfloat16)
        single = torch.randn(2, 4, 64, 64, device="cuda")
        mask = torch.zeros(256, 256, device="cuda", dtype=torch.float16)
        calls = [(half, True, None), (half, False, mask), (wide, False, None), (single, False, None)]
    outputs = [fused_attention(q, q, q, attn_mask=m, is_causal=c) for q, c, m in calls]
    record = xrt_torch.current_record()
    print(json.dumps({
        "outputs": [o.double().sum().item() for o in outputs],
        "decisions": sorted([d.op, d.kernel, d.status, d.shape] for d in record.decisions),
        "fallbacks": len(record.fallbacks),
    }))
    """
)


def _fresh_process(mode: str, lock: Path, device: str = "cpu") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", STEP, mode, str(lock), device],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _policy(mode: str, lock: Path, fallback: str = "warn") -> ExecutionPolicy:
    return ExecutionPolicy(lock=mode, lock_file=str(lock), fallback=fallback)  # type: ignore[arg-type]


def _record(lock: Path) -> torch.Tensor:
    query = torch.randn(2, 4, 16, 32)
    with xrt_torch.kernel_policy(exec_policy=_policy("record", lock)):
        fused_attention(query, query, query)
    return query


def test_record_then_replay_in_fresh_processes(tmp_path: Path) -> None:
    lock = tmp_path / "training.lock.json"
    recorded = _fresh_process("record", lock)
    entries = Lockfile.load(lock).domain("pytorch")
    backends = {e.shape.split(",")[0]: e.choice.backend for e in entries if e.layout != "switches"}
    # PyTorch's own selector: the CPU flash kernel for 4-D inputs, math for 3-D ones.
    assert backends == {"q=2x4x16x32": "flash_v2", "q=4x16x32": "math"}
    switch_groups = sorted(e.op for e in entries if e.layout == "switches")
    # The matmul group holds only CUDA switches (the BLAS library, TF32): a CPU-only run
    # records none, so neither the lock nor the record names cuBLAS.
    cuda = torch.cuda.is_available()
    assert switch_groups == ["attention", "conv", "determinism", *(["matmul"] if cuda else [])]
    named = json.dumps([[e.choice.backend, e.choice.options] for e in entries])
    assert ("cublas" in named) == cuda
    assert all(status == "decided" for _, _, status, _ in recorded["decisions"])

    replays = [_fresh_process("replay", lock) for _ in range(2)]
    for replayed in replays:
        assert replayed["fallbacks"] == 0
        assert replayed["outputs"] == recorded["outputs"]
        attention = [d for d in replayed["decisions"] if d[3]]
        assert {(kernel, status) for _, kernel, status, _ in attention} == {
            ("flash_v2", "locked"),
            ("math", "locked"),
        }
        switches = [d for d in replayed["decisions"] if not d[3]]
        assert {status for _, _, status, _ in switches} == {"locked"}
    assert replays[0]["decisions"] == replays[1]["decisions"]


def test_sdpa_backend_asks_pytorchs_selector() -> None:
    four, three = torch.randn(1, 2, 8, 16), torch.randn(2, 8, 16)
    assert sdpa_backend(four, four, four) == "flash_v2"
    assert sdpa_backend(three, three, three) == "math"


def _lock_backend(lock: Path, backend: str) -> None:
    data = Lockfile.load(lock)
    entries = [
        msgspec.structs.replace(e, choice=msgspec.structs.replace(e.choice, backend=backend))
        if e.op == "attention" and e.layout != "switches"
        else e
        for e in data
    ]
    Lockfile(entries, data.environments).save(lock)


def test_locked_backend_pytorch_refuses_goes_through_the_fallback(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    query = _record(lock)
    _lock_backend(lock, "efficient")  # no memory-efficient kernel on the CPU
    with xrt_torch.kernel_policy(exec_policy=_policy("replay", lock, "warn")):
        with pytest.warns(FallbackWarning, match="attention"):
            out = fused_attention(query, query, query)
        record = xrt_torch.current_record()
    expected = torch.nn.functional.scaled_dot_product_attention(query, query, query)
    torch.testing.assert_close(out, expected)
    statuses = {d.status for d in record.decisions if d.op == "attention" and d.shape}
    assert statuses == {"fallen_back"}
    with (
        xrt_torch.kernel_policy(exec_policy=_policy("replay", lock, "error")),
        pytest.raises(FallbackError, match="efficient"),
    ):
        fused_attention(query + 1, query, query)


def _as_other_machine(lock: Path) -> None:
    def other(fingerprint: dict[str, Any]) -> dict[str, Any]:
        packages = {**fingerprint["packages"], "torch": "1.0.0"}
        return {**fingerprint, "packages": packages}

    Lockfile.load(lock).map_environments(other).save(lock)


def test_lock_from_another_machine_raises_under_error(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(lock)
    _as_other_machine(lock)
    with pytest.raises(FallbackError, match=r"pytorch changed: locked with torch 1\.0\.0"):
        xrt_torch.set_kernel_policy(exec_policy=_policy("replay", lock, "error"))


def test_lock_from_another_machine_warns_under_warn(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    query = _record(lock)
    _as_other_machine(lock)
    with (
        pytest.warns(FallbackWarning, match="locked in another environment"),
        xrt_torch.kernel_policy(exec_policy=_policy("replay", lock, "warn")) as record,
    ):
        fused_attention(query, query, query)
    assert record.fallbacks
    assert {f.mode for f in record.fallbacks} == {"warn"}


def test_lock_from_another_machine_records_under_allow(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    query = _record(lock)
    _as_other_machine(lock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xrt_torch.kernel_policy(exec_policy=_policy("replay", lock, "allow")) as record:
            fused_attention(query, query, query)
            attention = [f for f in xrt_torch.current_record().fallbacks if "attention" in f.what]
    assert {f.mode for f in record.fallbacks} == {"allow"}
    assert attention
    assert "torch 1.0.0" in attention[0].reason


def test_signature_missing_from_the_lock_is_a_fallback(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(lock)
    other = torch.randn(1, 2, 4, 8)
    with (
        xrt_torch.kernel_policy(exec_policy=_policy("replay", lock, "error")),
        pytest.raises(FallbackError, match="not in the lockfile"),
    ):
        fused_attention(other, other, other)


def test_policy_setting_wins_over_a_contradicting_locked_switch(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(lock)
    strict = _policy("replay", lock, "allow").replace(deterministic=True)
    with xrt_torch.kernel_policy(exec_policy=strict) as record:
        assert torch.are_deterministic_algorithms_enabled()
    conflicts = [f for f in record.fallbacks if "determinism" in f.what]
    assert conflicts
    assert "the policy sets deterministic_algorithms='on'" in conflicts[0].reason


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("onnxscript") is not None,
    reason="onnxscript is installed: the bundle round trip runs in tests/backends",
)
def test_export_without_onnxscript_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"xpuruntime-torch\[export\]"):
        xrt_torch.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), tmp_path / "bundle")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (PyTorch sees none)")
def test_sdpa_lock_replays_the_same_backend_per_shape_on_cuda(tmp_path: Path) -> None:
    lock = tmp_path / "cuda.lock.json"
    _fresh_process("record", lock, "cuda")
    # Four call signatures (two share a shape: causal vs masked), each with PyTorch's choice.
    recorded = [e for e in Lockfile.load(lock).domain("pytorch") if e.layout != "switches"]
    assert len({(e.shape, e.layout) for e in recorded}) == 4
    for _ in range(3):
        replayed = _fresh_process("replay", lock, "cuda")
        assert replayed["fallbacks"] == 0
        locked = {(shape, kernel) for _, kernel, status, shape in replayed["decisions"] if shape}
        entries = Lockfile.load(lock).domain("pytorch")
        expected = {e.choice.backend for e in entries if e.layout != "switches"}
        assert {kernel for _, kernel in locked} == expected
        assert {status for _, _, status, shape in replayed["decisions"] if shape} == {"locked"}
