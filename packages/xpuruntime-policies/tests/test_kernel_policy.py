"""KernelPolicy and OpPolicy: modes, editing, reading, equality, repr."""

from __future__ import annotations

import pytest

from xpuruntime.policies import (
    BestPerformance,
    KernelPolicy,
    OpPolicy,
    PolicyValidationError,
    UnknownFieldError,
    UnknownKernelError,
    UnknownOpError,
)


def test_three_modes() -> None:
    policy = KernelPolicy(
        matmul="cublasLt", attention=OpPolicy(kernel="flash_v2", mode="prefer"), conv="auto"
    )
    assert [policy.mode(op) for op in ("matmul", "attention", "conv", "layernorm")] == [
        "pin",
        "prefer",
        "auto",
        None,
    ]
    assert policy.get("conv") == "auto"
    assert policy.preferences == {"matmul": "cublasLt", "attention": "flash_v2", "conv": "auto"}


def test_set_with_mode_and_auto() -> None:
    policy = KernelPolicy().set("matmul", "cublas", mode="prefer").set("attention", "auto")
    assert policy.entries == {
        "matmul": OpPolicy(kernel="cublas", mode="prefer"),
        "attention": OpPolicy(mode="auto"),
    }
    assert policy.set("attention", "auto", mode="auto").mode("attention") == "auto"


def test_remove_of_an_unset_op_is_a_no_op() -> None:
    policy = KernelPolicy(matmul="cublas")
    assert policy.remove("conv") == KernelPolicy(matmul="cublas")


def test_equality_and_copy_are_independent() -> None:
    policy = KernelPolicy(matmul="cublas")
    clone = policy.copy()
    clone.set("matmul", "cublasLt")
    assert policy.get("matmul") == "cublas"
    assert policy != clone
    assert KernelPolicy(matmul="cublas", strategy="best_performance") != policy
    assert policy != "cublas"
    with pytest.raises(TypeError, match="unhashable"):
        hash(policy)


def test_repr_is_readable_and_evaluates_back() -> None:
    policy = KernelPolicy(
        matmul="cublasLt",
        attention=OpPolicy(kernel="flash_v2", mode="prefer"),
        conv="auto",
        strategy=BestPerformance,
    )
    text = repr(policy)
    assert text == (
        "KernelPolicy(matmul='cublasLt', attention=OpPolicy(kernel='flash_v2', mode='prefer'),"
        " conv='auto', strategy=BestPerformance)"
    )
    assert (
        eval(
            text,
            {
                "KernelPolicy": KernelPolicy,
                "OpPolicy": OpPolicy,
                "BestPerformance": BestPerformance,
            },
        )
        == policy
    )


def test_strategy_setter_checks() -> None:
    policy = KernelPolicy()
    policy.strategy = "best_performance"
    assert policy.strategy is BestPerformance
    with pytest.raises(PolicyValidationError, match="Did you mean 'best_performance'"):
        policy.strategy = "best_perfomance"


def test_contains_and_len() -> None:
    policy = KernelPolicy(matmul="cublas", conv="auto")
    assert "matmul" in policy
    assert "attention" not in policy
    assert len(policy) == 2


def test_coerce() -> None:
    policy = KernelPolicy(matmul="cublas")
    assert KernelPolicy.coerce(policy) is policy
    assert KernelPolicy.coerce(None) == KernelPolicy()
    assert KernelPolicy.coerce({"matmul": "cublas"}) == policy
    with pytest.raises(PolicyValidationError, match="expected a KernelPolicy"):
        KernelPolicy.coerce(42)  # type: ignore[arg-type]
    with pytest.raises(UnknownOpError):
        KernelPolicy.coerce({"matmull": "cublas"})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"matmull": "cublas"},
            UnknownOpError,
            r"kernel.ops.matmull: unknown op 'matmull'\..*"
            r"Valid choices: attention, conv, layernorm, linear, matmul, rmsnorm\. Did you mean 'matmul'\?",
        ),
        (
            {"matmul": "cublasLT"},
            UnknownKernelError,
            r"unknown kernel 'cublasLT' for op 'matmul'"
            r"\. Valid choices: cpu, cublas, cublasLt, torch\. Did you mean 'cublasLt'\?",
        ),
        ({"attention": "flash"}, UnknownKernelError, r"Did you mean 'flash_v2'\?"),
        (
            {"matmul": 3},
            PolicyValidationError,
            r"kernel.ops.matmul: expected a kernel name,"
            r" 'auto' or OpPolicy\(\.\.\.\), got int 3",
        ),
        ({"matmul": OpPolicy(kernel="nope", mode="prefer")}, UnknownKernelError, "'nope'"),
    ],
)
def test_bad_names_and_types(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        KernelPolicy(**kwargs)  # type: ignore[arg-type]


def test_set_checks_names_and_modes() -> None:
    policy = KernelPolicy()
    with pytest.raises(UnknownKernelError, match="Did you mean 'cublasLt'"):
        policy.set("matmul", "cublaslt")
    with pytest.raises(PolicyValidationError, match="unknown mode 'fixed'"):
        policy.set("matmul", "cublas", mode="fixed")  # type: ignore[arg-type]
    with pytest.raises(PolicyValidationError, match="mode 'prefer' needs a kernel name"):
        policy.set("matmul", "auto", mode="prefer")
    assert len(policy) == 0  # nothing half-applied


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "mode 'pin' needs a kernel name, got None"),
        ({"kernel": "auto"}, "mode 'pin' needs a kernel name, got 'auto'"),
        ({"kernel": "cublas", "mode": "auto"}, "mode 'auto' takes no kernel"),
        ({"kernel": 7}, "kernel must be a kernel name"),
        ({"kernel": "cublas", "mode": "must"}, "unknown mode 'must'"),
    ],
)
def test_op_policy_checks(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyValidationError, match=message):
        OpPolicy(**kwargs)  # type: ignore[arg-type]


def test_op_policy_unknown_keyword() -> None:
    with pytest.raises(
        UnknownFieldError, match=r"OpPolicy has no setting 'kernal'.*Did you mean 'kernel'"
    ):
        OpPolicy(kernal="cublas")  # type: ignore[call-arg]


def test_aten_is_an_alias_of_torch() -> None:
    policy = KernelPolicy(matmul="aten", conv=OpPolicy(kernel="aten", mode="prefer"))
    assert policy == KernelPolicy(matmul="torch", conv=OpPolicy(kernel="torch", mode="prefer"))
    assert policy.get("matmul") == "torch"
    assert (
        policy.content_hash()
        == KernelPolicy(matmul="torch", conv=OpPolicy(kernel="torch", mode="prefer")).content_hash()
    )
