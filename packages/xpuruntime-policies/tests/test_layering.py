"""resolve_policy: defaults < file < environment < code, each layer checked as applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    MemoryPolicy,
    OpPolicy,
    PolicyConflictError,
    PolicyDocument,
    PolicyValidationError,
    UnknownFieldError,
    UnknownOpError,
    resolve_policy,
)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    document = PolicyDocument(
        kernel=KernelPolicy(matmul="cublasLt", attention="flash_v2"),
        execution=ExecutionPolicy(precision="fp16", device="cuda", num_threads=2),
    )
    return document.save(tmp_path / "base.yaml")


def test_defaults_only() -> None:
    assert resolve_policy(environ={}) == PolicyDocument()


def test_file_only(base: Path) -> None:
    document = resolve_policy(base, environ={})
    assert document.execution_policy().precision == "fp16"


def test_precedence_defaults_file_environment_code(base: Path) -> None:
    environ = {
        "XPURUNTIME_POLICY_PRECISION": "bf16",  # beats the file
        "XPURUNTIME_POLICY_DETERMINISTIC": "yes",
        "XPURUNTIME_POLICY_ENGINES": "tensorrt, onnxrt",
        "XPURUNTIME_POLICY_MEMORY_LIMIT_BYTES": "1073741824",
        "XPURUNTIME_POLICY_NUM_THREADS": "",  # empty unsets an optional setting
        "XPURUNTIME_POLICY_INPUT_SHAPES": '{"input": [1, 3, 224, 224]}',
        "XPURUNTIME_POLICY_KERNEL_MATMUL": "prefer:cublas",
        "XPURUNTIME_POLICY_KERNEL_STRATEGY": "best_performance",
        "UNRELATED": "ignored",
    }
    overrides = {"execution": {"precision": "fp8"}, "kernel": {"ops": {"attention": "auto"}}}
    policy = resolve_policy(base, environ=environ, overrides=overrides).execution_policy()
    assert policy.precision == "fp8"  # code beats the environment
    assert policy.deterministic is True
    assert policy.engines == ["tensorrt", "onnxruntime"]
    assert policy.memory == MemoryPolicy(pool=True, limit_bytes=1 << 30)
    assert policy.num_threads is None
    assert policy.input_shapes == {"input": [1, 3, 224, 224]}
    assert policy.device == "cuda"  # from the file, untouched above it
    assert policy.kernel_policy == KernelPolicy(
        matmul=OpPolicy(kernel="cublas", mode="prefer"),
        attention="auto",
        strategy="best_performance",
    )


def test_file_from_the_environment(base: Path) -> None:
    document = resolve_policy(environ={"XPURUNTIME_POLICY_FILE": str(base)})
    assert document == resolve_policy(base, environ={})


def test_reads_os_environ_by_default(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_FILE", str(base))
    monkeypatch.setenv("XPURUNTIME_POLICY_FALLBACK", "error")
    assert resolve_policy().execution_policy().fallback == "error"


@pytest.mark.parametrize(
    ("environ", "error", "message"),
    [
        (
            {"XPURUNTIME_POLICY_PRECISON": "fp16"},
            UnknownFieldError,
            r"environment: unknown environment variable XPURUNTIME_POLICY_PRECISON\..*"
            r"Did you mean 'XPURUNTIME_POLICY_PRECISION'\?",
        ),
        (
            {"XPURUNTIME_POLICY_STATIC_SHAPE": "maybe"},
            PolicyValidationError,
            r"environment: XPURUNTIME_POLICY_STATIC_SHAPE: cannot read 'maybe': expected one of",
        ),
        (
            {"XPURUNTIME_POLICY_NUM_THREADS": "four"},
            PolicyValidationError,
            r"XPURUNTIME_POLICY_NUM_THREADS: cannot read 'four'",
        ),
        (
            {"XPURUNTIME_POLICY_INPUT_SHAPES": "{input: [1]}"},
            PolicyValidationError,
            r"XPURUNTIME_POLICY_INPUT_SHAPES: cannot read",
        ),
        (
            {"XPURUNTIME_POLICY_PRECISION": "fp64"},
            PolicyValidationError,
            r"^environment \(XPURUNTIME_POLICY_\*\): execution.precision: 'fp64' is not allowed",
        ),
        (
            {"XPURUNTIME_POLICY_KERNEL_MATMULL": "cublas"},
            UnknownOpError,
            r"kernel.ops.matmull: unknown op 'matmull'",
        ),
        (
            {"XPURUNTIME_POLICY_DEVICE": "cpu"},
            PolicyConflictError,
            r"^environment \(XPURUNTIME_POLICY_\*\): contradictory settings:\n"
            r"  - attention is pinned to 'flash_v2', which runs on \['cuda'\], but device is 'cpu'",
        ),
    ],
)
def test_bad_environment_names_its_layer(
    base: Path, environ: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        resolve_policy(base, environ=environ)


def test_bad_override_names_its_layer(base: Path) -> None:
    with pytest.raises(PolicyValidationError, match=r"^overrides: execution.precision"):
        resolve_policy(base, environ={}, overrides={"execution": {"precision": "fp128"}})


def test_layered_policy_names_the_layer_of_each_setting(base: Path) -> None:
    from xpuruntime.policies import layered_policy

    layered = layered_policy(
        base,
        environ={"XPURUNTIME_POLICY_FALLBACK": "error", "XPURUNTIME_POLICY_PRECISION": "bf16"},
        arguments={"execution": {"precision": "fp32"}},
    )
    policy = layered.policy
    assert (policy.fallback, policy.precision, policy.device) == ("error", "fp32", "cuda")
    assert layered.sources["execution.fallback"] == ("environment (XPURUNTIME_POLICY_FALLBACK)")
    assert layered.sources["execution.precision"] == "argument"
    assert layered.sources["execution.device"] == f"policy {base}"
    assert layered.sources["kernel.ops.matmul"] == f"policy {base}"
    assert layered.source_of("execution.cuda_graphs") == "default"


def test_layered_policy_over_a_policy_object() -> None:
    from xpuruntime.policies import layered_policy

    layered = layered_policy(
        ExecutionPolicy(fallback="allow", num_threads=3),
        environ={"XPURUNTIME_POLICY_FALLBACK": "error"},
    )
    assert layered.policy.fallback == "error"  # the environment beats the policy object
    assert layered.policy.num_threads == 3
    assert layered.sources == {
        "execution.fallback": "environment (XPURUNTIME_POLICY_FALLBACK)",
        "execution.num_threads": "policy",
    }


def test_layered_policy_rejects_a_misspelled_variable() -> None:
    from xpuruntime.policies import layered_policy

    with pytest.raises(UnknownFieldError, match="XPURUNTIME_POLICY_PRECISION"):
        layered_policy(environ={"XPURUNTIME_POLICY_PRECISON": "fp16"})


def test_collectives_from_the_environment() -> None:
    from xpuruntime.policies import CollectivePolicy

    document = resolve_policy(
        environ={
            "XPURUNTIME_POLICY_COLLECTIVES_ALGORITHM": "ring",
            "XPURUNTIME_POLICY_COLLECTIVES_MAX_CHANNELS": "8",
        }
    )
    assert document.execution_policy().collectives == CollectivePolicy(
        algorithm="ring", max_channels=8
    )
    with pytest.raises(PolicyValidationError, match="NVLink multicast"):
        resolve_policy(environ={"XPURUNTIME_POLICY_COLLECTIVES_NVLS": "1"})
