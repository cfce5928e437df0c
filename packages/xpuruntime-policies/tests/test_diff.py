"""diff(a, b): setting-by-setting, readable, and empty exactly when the hashes agree."""

from __future__ import annotations

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    OpPolicy,
    PolicyDocument,
    diff,
)


def test_readable_lines_sorted_by_path() -> None:
    old = PolicyDocument(
        kernel=KernelPolicy(matmul="cublasLt", conv="cudnn"),
        execution=ExecutionPolicy(precision="fp32", input_shapes={"input.1": [1, 3]}),
    )
    new = PolicyDocument(
        kernel=KernelPolicy(matmul=OpPolicy(kernel="cublasLt", mode="prefer"), attention="auto"),
        execution=ExecutionPolicy(precision="fp16", input_shapes={"input.1": [2, 3]}),
    )
    changes = diff(old, new)
    assert str(changes).splitlines() == [
        '~ execution.input_shapes["input.1"]: [1, 3] -> [2, 3]',
        '~ execution.precision: "fp32" -> "fp16"',
        '+ kernel.ops.attention: "auto"',
        '- kernel.ops.conv: "cudnn"',
        '- kernel.ops.matmul: "cublasLt"',
        '+ kernel.ops.matmul.kernel: "cublasLt"',
        '+ kernel.ops.matmul.mode: "prefer"',
    ]
    assert [change.path for change in changes] == sorted(change.path for change in changes)
    kinds = {change.path: change.kind for change in changes}
    assert kinds["execution.precision"] == "changed"
    assert kinds["kernel.ops.attention"] == "added"
    assert kinds["kernel.ops.conv"] == "removed"
    assert changes
    assert len(changes) == len(kinds)


def test_no_differences() -> None:
    a = ExecutionPolicy(engines=["onnxrt"])
    b = ExecutionPolicy(engines=["onnxruntime"])
    result = diff(a, b)
    assert not result
    assert str(result) == "no differences"
    assert a.content_hash() == b.content_hash()


def test_mixed_kinds_of_policy() -> None:
    kernels = KernelPolicy(matmul="cublas")
    result = diff(kernels, PolicyDocument(kernel=kernels, execution=ExecutionPolicy()))
    assert {change.kind for change in result} == {"added"}
    assert all(change.path.startswith("execution.") for change in result)


def test_type_change_is_a_change() -> None:
    a = ExecutionPolicy(engine_options={"tensorrt": {"level": 1}})
    b = ExecutionPolicy(engine_options={"tensorrt": {"level": True}})
    assert str(diff(a, b)) == "~ execution.engine_options.tensorrt.level: 1 -> true"
