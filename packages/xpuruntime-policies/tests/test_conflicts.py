"""Contradictory settings: one PolicyConflictError naming each contradiction and its fix."""

from __future__ import annotations

import pytest

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    OpPolicy,
    PolicyConflictError,
    PolicyDocument,
    check_conflicts,
    find_conflicts,
)


@pytest.mark.parametrize(
    ("settings", "kernels", "message"),
    [
        (
            {"device": "cpu"},
            {"matmul": "cublasLt"},
            r"matmul is pinned to 'cublasLt', which runs on \['cuda'\], but device is 'cpu';"
            r" pin one of \['cpu', 'torch'\], use mode 'prefer' or 'auto', or change device",
        ),
        (
            {"engines": ["openvino"]},
            {"conv": "cudnn"},
            r"conv is pinned to 'cudnn', which engines \['onnxruntime'\] run, but engines are"
            r" \['openvino'\]",
        ),
        (
            # TensorRT can only steer towards cuBLAS (tactic sources), never guarantee it.
            {"engines": ["tensorrt"]},
            {"matmul": "cublas"},
            r"which engines \['onnxruntime'\] run, but engines are \['tensorrt'\]",
        ),
        (
            {"device": "npu", "engines": ["openvino", "qnn"]},
            {"attention": "flash_v2"},
            r"attention is pinned to 'flash_v2', which runs on \['cuda'\], but device is 'npu';"
            r" no attention kernel runs on npu: use mode 'prefer' or 'auto', or change device",
        ),
        (
            {"precision": "int8", "engines": ["qnn"]},
            None,
            r"precision 'int8' on \['qnn'\] runs only a quantized \(QDQ\) model, and quantized_model"
            r" is not set; set quantized_model",
        ),
        (
            {"device": "npu", "engines": ["tensorrt"]},
            None,
            r"device 'npu' is not run by any of engines \['tensorrt'\]; add one of"
            r" \['openvino', 'qnn'\]",
        ),
        ({"device": "cpu", "cuda_graphs": True}, None, r"cuda_graphs=True needs a CUDA device"),
        ({"device": "cpu", "precision": "tf32"}, None, r"precision 'tf32' exists only on CUDA"),
        ({"device": "npu:0", "precision": "fp8"}, None, r"precision 'fp8' exists only on CUDA"),
    ],
)
def test_each_contradiction(
    settings: dict[str, object], kernels: dict[str, str] | None, message: str
) -> None:
    kernel_policy = KernelPolicy(**kernels) if kernels else None
    with pytest.raises(PolicyConflictError, match=f"(?s)^contradictory settings:.*{message}"):
        ExecutionPolicy(**settings, kernel_policy=kernel_policy)  # type: ignore[arg-type]


def test_several_contradictions_are_listed_together() -> None:
    with pytest.raises(PolicyConflictError) as caught:
        ExecutionPolicy(
            device="cpu", engines=["openvino"], kernel_policy=KernelPolicy(matmul="cublas")
        )
    lines = str(caught.value).splitlines()
    assert lines[0] == "contradictory settings:"
    assert len(lines) == 3
    assert all(line.startswith("  - matmul is pinned to 'cublas'") for line in lines[1:])


@pytest.mark.parametrize(
    "settings",
    [
        {"device": "cpu", "engines": ["openvino"]},
        {"precision": "int8", "engines": ["qnn"], "quantized_model": "model.qdq.onnx"},
        {"precision": "int8", "engines": ["qnn", "openvino"]},  # openvino may quantize
        {"device": "cuda:0", "cuda_graphs": True, "precision": "tf32"},
    ],
)
def test_consistent_settings_pass(settings: dict[str, object]) -> None:
    assert find_conflicts(ExecutionPolicy(**settings)) == []  # type: ignore[arg-type]


def test_prefer_and_auto_never_conflict() -> None:
    kernels = KernelPolicy(matmul=OpPolicy(kernel="cublasLt", mode="prefer"), attention="auto")
    ExecutionPolicy(device="cpu", engines=["openvino"], kernel_policy=kernels)


def test_training_only_kernels_are_not_bound_by_the_engine_list() -> None:
    # No inference engine can guarantee cuBLASLt: only PyTorch and xpuruntime's ops run it.
    ExecutionPolicy(engines=["openvino"], kernel_policy=KernelPolicy(matmul="cublasLt"))
    ExecutionPolicy(engines=["openvino"], kernel_policy=KernelPolicy(layernorm="apex"))


def test_document_checks_its_two_sections_together() -> None:
    with pytest.raises(PolicyConflictError, match="device is 'cpu'"):
        PolicyDocument(kernel=KernelPolicy(conv="cudnn"), execution=ExecutionPolicy(device="cpu"))


def test_session_time_check_with_the_chosen_engine_and_device() -> None:
    # A policy leaving engine and device open is fine; the choice a session makes is not.
    policy = ExecutionPolicy(kernel_policy=KernelPolicy(matmul="cublas"))
    check_conflicts(policy, policy.kernel_policy, engine="onnxruntime", device="cuda:0")
    with pytest.raises(PolicyConflictError, match="engines are \\['openvino'\\]"):
        check_conflicts(policy, policy.kernel_policy, engine="openvino")
    with pytest.raises(PolicyConflictError, match="device is 'cpu'"):
        check_conflicts(policy, policy.kernel_policy, engine="onnxrt", device="cpu")
