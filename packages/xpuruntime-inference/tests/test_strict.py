"""Strict policies: nothing runs elsewhere than asked without an error or a record.

This machine's ONNX Runtime has no CUDA execution provider (or no GPU), so asking for CUDA
exercises the device fallback for real under each fallback mode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import FallbackWarning

no_cuda = pytest.mark.usefixtures("without_cuda_ep")


@no_cuda
def test_cuda_requested_under_error_raises(mlp: Path) -> None:
    with pytest.raises(FallbackError) as info:
        InferenceSession(mlp, device="cuda:0", exec_policy=ExecutionPolicy(fallback="error"))
    message = str(info.value)
    assert "CUDAExecutionProvider" in message
    assert "fallback='error'" in message
    assert "pip install 'xpuruntime[cuda]'" in message or "no CUDA device" in message


@no_cuda
def test_cuda_requested_under_warn_warns_and_records(mlp: Path) -> None:
    with pytest.warns(FallbackWarning, match="CUDAExecutionProvider"):
        sess = InferenceSession(mlp, device="cuda:0", exec_policy=ExecutionPolicy(fallback="warn"))
    record = sess.record()
    assert sess.device == "cpu"
    assert record.device is not None
    assert (record.device.requested, record.device.chosen) == ("cuda:0", "cpu")
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.chosen, fallback.mode) == (
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
        "warn",
    )
    # The session then runs, on the CPU, and every node says so.
    assert sess.run({"input": np.ones((1, 4), np.float32)})["output"].shape == (1, 3)
    assert {n.chosen for n in record.nodes} == {"CPUExecutionProvider"}


@no_cuda
def test_cuda_requested_under_allow_records_silently(
    mlp: Path, recwarn: pytest.WarningsRecorder
) -> None:
    sess = InferenceSession(mlp, device="cuda", exec_policy=ExecutionPolicy(fallback="allow"))
    assert not [w for w in recwarn if issubclass(w.category, FallbackWarning)]
    (fallback,) = sess.record().fallbacks
    assert fallback.mode == "allow"
    assert "CUDA" in fallback.reason


def test_node_assignment_is_recorded(mlp: Path) -> None:
    policy = ExecutionPolicy(fallback="error", graph_optimization="disabled")
    sess = InferenceSession(mlp, device="cpu", exec_policy=policy)
    nodes = {n.name: n for n in sess.record().nodes}
    assert set(nodes) == {"matmul", "add_bias", "relu"}
    assert nodes["matmul"].op_type == "MatMul"
    assert nodes["matmul"].requested == nodes["matmul"].chosen == "CPUExecutionProvider"
    assert nodes["relu"].precision == "fp32"
    assert not sess.record().fallbacks


def test_node_assignment_after_fusion(mlp: Path) -> None:
    # ONNX Runtime reports placement after its basic fusions (MatMul + Add -> one node);
    # the fused node keeps the original name as a prefix, and its precision.
    sess = InferenceSession(mlp, device="cpu", exec_policy=ExecutionPolicy(fallback="error"))
    nodes = sess.record().nodes
    assert {n.chosen for n in nodes} == {"CPUExecutionProvider"}
    assert "relu" in {n.name for n in nodes}
    assert all(n.precision == "fp32" for n in nodes)


def test_pinned_kernel_the_engine_cannot_enforce() -> None:
    from xpuruntime.inference.demo import DEMO_MODEL  # has a Conv node

    # ONNX Runtime's CPU provider runs its own convolution, never oneDNN's.
    policy = KernelPolicy(conv="onednn")
    with pytest.raises(UnsupportedOperationError, match="pins conv='onednn'"):
        InferenceSession(
            DEMO_MODEL,
            device="cpu",
            kernel_policy=policy,
            exec_policy=ExecutionPolicy(fallback="error"),
        )
    with pytest.warns(FallbackWarning, match="kernel for conv"):
        sess = InferenceSession(DEMO_MODEL, device="cpu", kernel_policy=policy)
    record = sess.record()
    (decision,) = record.decisions
    assert (decision.op, decision.mode) == ("conv", "pin")
    assert "cannot guarantee" in decision.reason
    setting = next(s for s in record.settings if s.name == "kernel_policy.conv")
    assert not setting.honoured
    (fallback,) = record.fallbacks
    assert (fallback.requested, fallback.mode) == ("onednn", "warn")


def test_preferred_kernel_is_recorded_not_raised() -> None:
    from xpuruntime.inference.demo import DEMO_MODEL

    policy = KernelPolicy().set("conv", "onednn", mode="prefer")
    sess = InferenceSession(
        DEMO_MODEL,
        device="cpu",
        kernel_policy=policy,
        exec_policy=ExecutionPolicy(fallback="allow"),
    )
    (fallback,) = sess.record().fallbacks
    assert fallback.mode == "allow"


def test_kernel_the_engine_enforces_and_absent_ops(mlp: Path) -> None:
    policy = KernelPolicy(matmul="cpu", attention="math", layernorm="cpu")
    sess = InferenceSession(
        mlp, device="cpu", kernel_policy=policy, exec_policy=ExecutionPolicy(fallback="error")
    )
    settings = {s.name: s for s in sess.record().settings}
    assert settings["kernel_policy.matmul"].honoured
    assert settings["kernel_policy.attention"].honoured
    assert "no attention nodes" in settings["kernel_policy.attention"].note
    assert {d.op: d.kernel for d in sess.record().decisions} == {
        "matmul": "cpu",
        "attention": "math",
        "layernorm": "cpu",
    }
    assert not sess.record().fallbacks


def test_precision_the_engine_cannot_apply(mlp: Path) -> None:
    with pytest.raises(FallbackError, match="precision"):
        InferenceSession(
            mlp, device="cpu", fp16=True, exec_policy=ExecutionPolicy(fallback="error")
        )
    sess = InferenceSession(
        mlp, device="cpu", fp16=True, exec_policy=ExecutionPolicy(fallback="allow")
    )
    precision = sess.record().precision
    assert precision is not None
    assert (precision.requested, precision.chosen) == ("fp16", "fp32")
    assert "convert_float_to_float16" in precision.reason


def test_settings_say_what_was_honoured(mlp: Path) -> None:
    policy = ExecutionPolicy(
        num_threads=1,
        graph_optimization="basic",
        deterministic=True,
        memory={"limit_bytes": 1 << 20},
        fallback="allow",
    )
    sess = InferenceSession(mlp, device="cpu", exec_policy=policy)
    settings = {s.name: s for s in sess.record().settings}
    assert settings["graph_optimization"].applied == "ORT_ENABLE_BASIC"
    assert settings["num_threads"].applied == "intra_op_num_threads=1"
    assert settings["deterministic"].honoured
    assert not settings["memory.limit_bytes"].honoured
    assert "no memory limit" in settings["memory.limit_bytes"].note


def test_npu_is_not_an_onnxruntime_device_here(mlp: Path) -> None:
    with pytest.raises(FallbackError, match="engine='openvino'"):
        InferenceSession(
            mlp, device="npu", engine="onnxruntime", exec_policy=ExecutionPolicy(fallback="error")
        )
    sess = InferenceSession(
        mlp, device="npu", engine="onnxruntime", exec_policy=ExecutionPolicy(fallback="allow")
    )
    assert sess.device == "cpu"
    assert sess.record().fallbacks[0].requested == "NPU execution provider"
