"""Kernel policy -> PyTorch switches: mapping, read-back, record, clearing and errors."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    OpPolicy,
    PolicyConflictError,
    PolicyError,
)
from xpuruntime.policies.lock import Lockfile
from xpuruntime.pytorch.switches import SWITCHES, read_all
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning

# Kernels decided for a CUDA device: CUDA kernels set PyTorch's switches on any machine.
CUDA = ExecutionPolicy(device="cuda")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only machine")


def _setting(record: ExecutionRecord, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in record.settings if s.name == name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CPU build has no cuBLASLt")
def test_matmul_cublaslt_sets_preferred_blas_library_and_reads_back() -> None:
    record = xrt_torch.set_kernel_policy(matmul="cublasLt")
    assert torch.backends.cuda.preferred_blas_library().name.lower() == "cublaslt"
    setting = _setting(record, "matmul")
    assert setting.honoured
    assert setting.applied == {"preferred_blas_library": "cublaslt"}
    assert record.kind == "training"
    assert record.policy_hash == KernelPolicy(matmul="cublasLt").content_hash()
    assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublasLt")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a build without cuBLASLt")
def test_pinned_cublaslt_on_a_build_without_it_raises_pytorchs_refusal() -> None:
    before = read_all()
    strict = ExecutionPolicy(device="cuda", fallback="error")
    with pytest.raises(UnsupportedOperationError, match="not been compiled with cuBLASLt"):
        xrt_torch.set_kernel_policy(matmul="cublasLt", attention="math", exec_policy=strict)
    assert read_all() == before  # nothing half-applied
    assert xrt_torch.get_kernel_policy() is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a build without cuBLASLt")
def test_preferred_cublaslt_on_a_build_without_it_is_recorded() -> None:
    policy = KernelPolicy(matmul=OpPolicy(kernel="cublasLt", mode="prefer"))
    record = xrt_torch.set_kernel_policy(
        policy, exec_policy=ExecutionPolicy(device="cuda", fallback="allow")
    )
    setting = _setting(record, "matmul")
    assert not setting.honoured
    assert setting.applied == {"preferred_blas_library": "cublas"}
    assert "not been compiled with cuBLASLt" in setting.note
    (fallback,) = record.fallbacks
    assert (fallback.what, fallback.mode) == ("kernel for matmul", "allow")


@no_cuda
def test_cuda_kernel_pinned_on_a_cpu_machine_follows_the_fallback_mode() -> None:
    """The issue's case: training and inference must treat this pin alike."""
    before = read_all()
    strict = ExecutionPolicy(fallback="error")
    with pytest.raises(UnsupportedOperationError, match=r"pins matmul='cublasLt'.*runs on cuda"):
        xrt_torch.set_kernel_policy(KernelPolicy(matmul="cublasLt"), exec_policy=strict)
    assert read_all() == before
    with pytest.warns(FallbackWarning, match="kernel for matmul"):
        record = xrt_torch.set_kernel_policy(matmul="cublasLt")
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen, fallback.mode) == (
        "cublasLt",
        "PyTorch's default kernel",
        "warn",
    )
    assert read_all() == before  # nothing switched for a kernel that cannot run here
    assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublasLt")


@no_cuda
def test_cpu_matmul_is_a_kernel_pytorch_runs_on_the_cpu() -> None:
    record = xrt_torch.set_kernel_policy(
        matmul="cpu", conv="onednn", exec_policy=ExecutionPolicy(fallback="error")
    )
    assert _setting(record, "matmul").honoured
    assert _setting(record, "conv").applied == {"mkldnn.enabled": True}
    assert record.fallbacks == []


def test_cpu_kernel_for_cuda_is_a_conflict_when_pinned_and_a_fallback_when_preferred() -> None:
    policy = ExecutionPolicy(device="cuda", fallback="error")
    # The policy layer refuses the contradiction before PyTorch is touched (as inference does).
    with pytest.raises(PolicyConflictError, match="pinned to 'cpu'"):
        xrt_torch.set_kernel_policy(matmul="cpu", exec_policy=policy)
    preferred = KernelPolicy().set("matmul", "cpu", "prefer")
    with pytest.warns(FallbackWarning, match="'cpu' runs on cpu and this training runs on cuda"):
        xrt_torch.set_kernel_policy(preferred, exec_policy=policy)


def test_matmul_cublas_reads_back() -> None:
    record = xrt_torch.set_kernel_policy(matmul="cublas", exec_policy=CUDA)
    assert _setting(record, "matmul").applied == {"preferred_blas_library": "cublas"}
    assert (
        record.policy_hash
        == CUDA.replace(kernel_policy=KernelPolicy(matmul="cublas")).content_hash()
    )
    assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublas")


def test_pinned_attention_leaves_only_that_sdpa_backend_enabled() -> None:
    record = xrt_torch.set_kernel_policy(KernelPolicy(attention="flash_v2"), exec_policy=CUDA)
    assert torch.backends.cuda.flash_sdp_enabled()
    assert not torch.backends.cuda.mem_efficient_sdp_enabled()
    assert not torch.backends.cuda.math_sdp_enabled()
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert _setting(record, "attention").honoured


def test_preferred_attention_moves_backend_first_without_disabling_others() -> None:
    policy = KernelPolicy(attention=OpPolicy(kernel="math", mode="prefer"))
    xrt_torch.set_kernel_policy(policy)
    assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled()
    if SWITCHES["sdp.priority_order"].available():
        assert torch._C._get_sdp_priority_order()[0] == int(torch.nn.attention.SDPBackend.MATH)


@pytest.mark.parametrize(("precision", "tf32"), [("fp32", False), ("tf32", True), ("bf16", True)])
def test_execution_precision_maps_to_tf32_switches(precision: str, tf32: bool) -> None:
    record = xrt_torch.set_kernel_policy(exec_policy=ExecutionPolicy(precision=precision))
    setting = _setting(record, "precision")
    assert setting.honoured
    if SWITCHES["cuda.matmul.fp32_precision"].available():
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
        assert torch.backends.cudnn.conv.fp32_precision == ("tf32" if tf32 else "ieee")
    else:
        assert torch.backends.cuda.matmul.allow_tf32 is tf32
    assert record.precision is not None
    assert record.precision.requested == precision
    if torch.cuda.is_available():
        assert record.precision.chosen == precision
    else:
        # The switches moved, but they act on CUDA only: nothing claims the CPU step's
        # precision, and the record says why.
        assert record.precision.chosen is None
        assert "runs on the CPU" in record.precision.reason


def test_deterministic_policy_sets_determinism_and_disables_benchmark() -> None:
    policy = ExecutionPolicy(deterministic=True)
    record = xrt_torch.set_kernel_policy(exec_policy=policy)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark
    assert _setting(record, "deterministic").honoured
    xrt_torch.clear_kernel_policy()
    assert not torch.are_deterministic_algorithms_enabled()


def test_cudnn_benchmark_follows_the_throughput_hint() -> None:
    xrt_torch.set_kernel_policy(exec_policy=ExecutionPolicy(performance_hint="throughput"))
    assert torch.backends.cudnn.benchmark
    xrt_torch.set_kernel_policy(
        exec_policy=ExecutionPolicy(performance_hint="throughput", deterministic=True)
    )
    assert not torch.backends.cudnn.benchmark
    xrt_torch.set_kernel_policy(exec_policy=ExecutionPolicy(performance_hint="latency"))
    assert not torch.backends.cudnn.benchmark


def test_new_policy_replaces_previous_one() -> None:
    before = read_all()
    xrt_torch.set_kernel_policy(attention="math")
    xrt_torch.set_kernel_policy(matmul="cublas", exec_policy=CUDA)
    # attention is no longer pinned: its switches are back to what they were
    for name in ("sdp.flash", "sdp.mem_efficient", "sdp.math", "sdp.cudnn"):
        assert SWITCHES[name].read() == before[name]


def test_clear_restores_every_switch() -> None:
    before = read_all()
    xrt_torch.set_kernel_policy(
        KernelPolicy(attention="efficient"),
        exec_policy=ExecutionPolicy(device="cuda", precision="tf32", deterministic=True),
    )
    assert read_all() != before
    xrt_torch.clear_kernel_policy()
    assert read_all() == before
    assert xrt_torch.get_kernel_policy() is None


def test_set_without_arguments_clears() -> None:
    xrt_torch.set_kernel_policy(attention="math")
    xrt_torch.set_kernel_policy()
    assert xrt_torch.get_kernel_policy() is None


def test_pinned_kernel_pytorch_cannot_select_raises_and_changes_nothing() -> None:
    before = read_all()
    strict = ExecutionPolicy(device="cuda", fallback="error")
    with pytest.raises(UnsupportedOperationError, match="pins layernorm='apex'") as info:
        xrt_torch.set_kernel_policy(matmul="cublas", layernorm="apex", exec_policy=strict)
    assert "no 'apex' kernel" in str(info.value)
    assert read_all() == before
    assert xrt_torch.get_kernel_policy() is None


def test_preferred_kernel_pytorch_cannot_select_is_warned_or_recorded() -> None:
    # Preferring accepts a fallback: warned even under fallback='error', as in inference.
    policy = KernelPolicy(layernorm=OpPolicy(kernel="apex", mode="prefer"))
    with pytest.warns(FallbackWarning, match="apex"):
        record = xrt_torch.set_kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="error"))
    assert (record.fallbacks[0].requested, record.fallbacks[0].mode) == ("apex", "warn")
    assert record.fallbacks[0].chosen == "PyTorch's default kernel"
    record = xrt_torch.set_kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="allow"))
    assert record.fallbacks[0].mode == "allow"


def test_op_of_an_unapplied_entry_runs_pytorchs_default_without_a_second_fallback() -> None:
    policy = KernelPolicy(layernorm=OpPolicy(kernel="apex", mode="prefer"))
    with xrt_torch.kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="allow")) as record:
        x = torch.randn(2, 8)
        torch.testing.assert_close(
            xrt_torch.ops.fused_layernorm(x, [8]), torch.nn.functional.layer_norm(x, [8])
        )
        assert len(record.fallbacks) == 1
        assert record.decisions[-1].mode == "auto"


def test_policy_and_keywords_together_are_rejected() -> None:
    with pytest.raises(PolicyError, match="not both"):
        xrt_torch.set_kernel_policy(KernelPolicy(matmul="cublas"), attention="math")


def test_execution_policy_passed_as_kernel_policy_is_rejected() -> None:
    with pytest.raises(PolicyError, match="exec_policy"):
        xrt_torch.set_kernel_policy(ExecutionPolicy())  # type: ignore[arg-type]


def test_execution_policy_kernel_policy_is_used() -> None:
    execution = ExecutionPolicy(kernel_policy=KernelPolicy(attention="math"))
    xrt_torch.set_kernel_policy(exec_policy=execution)
    assert xrt_torch.get_kernel_policy() == KernelPolicy(attention="math")
    assert xrt_torch.get_execution_policy() == execution


def test_record_round_trips_through_json() -> None:
    record = xrt_torch.set_kernel_policy(
        attention="math", exec_policy=ExecutionPolicy(precision="tf32")
    )
    again = ExecutionRecord.from_json(record.to_json())
    assert again.settings == record.settings
    assert record.environment_hash
    assert any("process-global" in note for note in record.notes)


def test_int8_training_precision_goes_through_fallback() -> None:
    with pytest.raises(FallbackError, match="int8"):
        xrt_torch.set_kernel_policy(exec_policy=ExecutionPolicy(precision="int8", fallback="error"))


# -- records that never claim what did not happen ------------------------------------------


def _cpu_step() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    model(torch.randn(4, 8)).sum().backward()


@no_cuda
def test_a_cpu_training_record_names_no_cuda_library(tmp_path: Path) -> None:
    """KernelPolicy(matmul="cpu", linear="cpu") on a CPU-only machine, with the lockfile
    recording: neither the decisions, the kernels nor the lock may name cuBLAS (the BLAS
    library switch exists, but decides nothing without CUDA)."""
    lock = tmp_path / "cpu.lock.json"
    xrt_torch.set_kernel_policy(
        KernelPolicy(matmul="cpu", linear="cpu"),
        exec_policy=ExecutionPolicy(lock="record", lock_file=str(lock)),
    )
    record = xrt_torch.explain(_cpu_step)
    xrt_torch.clear_kernel_policy()
    assert record.nodes  # the step's CPU operators were observed
    assert {node.chosen for node in record.nodes} == {"cpu"}
    assert record.kernels == []  # no device kernel launched
    claims = [record.decisions, record.kernels, record.nodes, record.settings, record.fallbacks]
    locked = [[e.choice.backend, e.choice.kernel, e.choice.options] for e in Lockfile.load(lock)]
    text = json.dumps([msgspec.to_builtins(claims), locked]).lower()
    assert "cublas" not in text  # (the environment fingerprint lists cuBLAS as absent: null)
    assert "matmul" not in {decision.op for decision in record.decisions}


def test_every_training_record_names_policy_environment_device_and_precision() -> None:
    with xrt_torch.kernel_policy(
        KernelPolicy(matmul="cpu", linear="cpu"), exec_policy=ExecutionPolicy(precision="bf16")
    ):
        record = xrt_torch.explain(_cpu_step)
    assert record.policy["kernel"]["ops"]["matmul"] == "cpu"
    assert record.environment  # the fingerprint: packages, machine, GPUs
    assert record.environment_hash
    assert record.device is not None
    assert record.device.chosen == ("cuda" if torch.cuda.is_available() else "cpu")
    assert record.precision is not None
    assert record.precision.requested == "bf16"
    assert record.precision.chosen == "bf16" or record.precision.reason


def test_without_a_policy_the_record_says_so_and_still_names_the_environment() -> None:
    xrt_torch.clear_kernel_policy()
    record = xrt_torch.explain(_cpu_step)
    assert record.policy == {}
    assert any("no kernel policy is set" in note for note in record.notes)
    assert record.environment
    assert record.device is not None
    assert record.device.chosen in ("cpu", "cuda")
    assert record.precision is not None
    assert record.precision.chosen is None
    assert "autocast" in record.precision.reason


def test_policy_sources_name_each_settings_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_DETERMINISTIC", "0")
    record = xrt_torch.set_kernel_policy(
        exec_policy=ExecutionPolicy(precision="tf32"), attention="math"
    )
    assert record.policy_sources == {
        "execution.precision": "policy",
        "execution.deterministic": "environment (XPURUNTIME_POLICY_DETERMINISTIC)",
        "kernel.ops.attention": "argument",
    }
    # A scope entered again with the environment changed sees the change (the layering is
    # cached on the XPURUNTIME_POLICY_* variables, never across a change of them).
    monkeypatch.delenv("XPURUNTIME_POLICY_DETERMINISTIC")
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(precision="tf32")) as scoped:
        assert "execution.deterministic" not in scoped.policy_sources
    monkeypatch.setenv("XPURUNTIME_POLICY_DETERMINISTIC", "1")
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(precision="tf32")) as scoped:
        assert scoped.policy_sources["execution.deterministic"].startswith("environment")
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
