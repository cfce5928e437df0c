"""Kernel policy -> PyTorch switches: mapping, read-back, record, clearing and errors."""

from __future__ import annotations

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy, KernelPolicy, OpPolicy, PolicyError
from xpuruntime.pytorch.switches import SWITCHES, read_all
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning


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
    with pytest.raises(UnsupportedOperationError, match="not been compiled with cuBLASLt"):
        xrt_torch.set_kernel_policy(matmul="cublasLt", attention="math")
    assert read_all() == before  # nothing half-applied
    assert xrt_torch.get_kernel_policy() is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a build without cuBLASLt")
def test_preferred_cublaslt_on_a_build_without_it_is_recorded() -> None:
    policy = KernelPolicy(matmul=OpPolicy(kernel="cublasLt", mode="prefer"))
    record = xrt_torch.set_kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="allow"))
    setting = _setting(record, "matmul")
    assert not setting.honoured
    assert setting.applied == {"preferred_blas_library": "cublas"}
    assert "not been compiled with cuBLASLt" in setting.note
    assert record.fallbacks[0].what == "setting matmul"


def test_matmul_cublas_reads_back() -> None:
    record = xrt_torch.set_kernel_policy(matmul="cublas")
    assert _setting(record, "matmul").applied == {"preferred_blas_library": "cublas"}
    assert record.policy_hash == KernelPolicy(matmul="cublas").content_hash()
    assert xrt_torch.get_kernel_policy() == KernelPolicy(matmul="cublas")


def test_pinned_attention_leaves_only_that_sdpa_backend_enabled() -> None:
    record = xrt_torch.set_kernel_policy(KernelPolicy(attention="flash_v2"))
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
    assert record.precision.chosen == precision


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
    xrt_torch.set_kernel_policy(matmul="cublas")
    # attention is no longer pinned: its switches are back to what they were
    for name in ("sdp.flash", "sdp.mem_efficient", "sdp.math", "sdp.cudnn"):
        assert SWITCHES[name].read() == before[name]


def test_clear_restores_every_switch() -> None:
    before = read_all()
    xrt_torch.set_kernel_policy(
        KernelPolicy(attention="efficient"),
        exec_policy=ExecutionPolicy(precision="tf32", deterministic=True),
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
    with pytest.raises(UnsupportedOperationError, match="cannot run under PyTorch") as info:
        xrt_torch.set_kernel_policy(matmul="cublas", layernorm="apex")
    assert "'apex'" in str(info.value)
    assert read_all() == before
    assert xrt_torch.get_kernel_policy() is None


def test_preferred_kernel_pytorch_cannot_select_follows_fallback_mode() -> None:
    policy = KernelPolicy(layernorm=OpPolicy(kernel="apex", mode="prefer"))
    with pytest.raises(FallbackError, match="apex"):
        xrt_torch.set_kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="error"))
    with pytest.warns(FallbackWarning, match="apex"):
        record = xrt_torch.set_kernel_policy(policy, exec_policy=ExecutionPolicy(fallback="warn"))
    assert record.fallbacks[0].requested == "apex"
    assert record.fallbacks[0].chosen == "pytorch default"


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
