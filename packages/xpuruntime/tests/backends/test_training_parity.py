"""Training and inference treat a kernel the policy names alike.

Table-driven over the whole kernel vocabulary x {cpu, cuda} x {pin, prefer} x {error, warn,
allow}: each side's outcome (honoured, raises, warned fallback, allowed fallback, policy
conflict) must be what one rule gives for whether that side's engine honours the kernel on
the device, as its published kernel table says: inference through a real InferenceSession on
ONNX Runtime, training through the PyTorch extension running the op under ``explain()``.
Where both tables agree (``matmul="cublasLt"`` on a CPU, the issue's case) the outcomes are
therefore equal.

On a machine without CUDA the cuda column is what each side's mapping layer decides for a
CUDA device (no GPU needed to decide it); the ``gpu`` tests run the cuda column for real.
Needs PyTorch and ONNX Runtime: ``nox -s "backends(backend='torch-cpu')"`` (CPU) and
``nox -s "gpu_backends(backend='cuda')"`` (GPU).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="training parity needs PyTorch (backends-torch-cpu)")
# torch alone is not enough: a session that built the wheels holds torch without them.
pytest.importorskip(
    "xpuruntime.pytorch",
    reason="training parity needs xpuruntime-torch (backends-torch-cpu)",
    exc_type=ImportError,
)
ort = pytest.importorskip("onnxruntime", reason="training parity needs ONNX Runtime")

import onnx  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import xpuruntime.pytorch as xrt_torch  # noqa: E402
from xpuruntime.inference import InferenceSession  # noqa: E402
from xpuruntime.inference.engines.ort_kernels import kernel_support  # noqa: E402
from xpuruntime.inference.engines.ort_options import CUDA_EP  # noqa: E402
from xpuruntime.inference.kernel_mapping import apply_kernel_policy  # noqa: E402
from xpuruntime.policies import (  # noqa: E402
    ExecutionPolicy,
    KernelPolicy,
    PolicyConflictError,
    vocabulary,
)
from xpuruntime.pytorch.mapping import plan  # noqa: E402
from xpuruntime.pytorch.policy import record_unapplicable  # noqa: E402
from xpuruntime.runtime.decisions import Decisions  # noqa: E402
from xpuruntime.runtime.errors import UnsupportedOperationError  # noqa: E402
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning  # noqa: E402

VOCABULARY = [(spec.op, spec.name) for spec in vocabulary.BUILTIN_KERNELS]
MODES = ("pin", "prefer")
FALLBACKS = ("error", "warn", "allow")
CASES = list(itertools.product(VOCABULARY, MODES, FALLBACKS))
HAS_CUDA = torch.cuda.is_available()
#: The cuda column's inference side runs on ONNX Runtime's CUDA provider: a GPU machine
#: with the CPU build of ONNX Runtime has none.
HAS_ORT_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


def _id(case: tuple[tuple[str, str], str, str]) -> str:
    (op, kernel), mode, fallback = case
    return f"{op}={kernel}-{mode}-{fallback}"


def expected(honoured: bool, mode: str, fallback: str) -> str:
    """The one rule, written out: what happens to a kernel entry on an engine."""
    if honoured:
        return "honoured"
    if mode == "pin":
        return {"error": "raises", "warn": "warn", "allow": "allow"}[fallback]
    return "allow" if fallback == "allow" else "warn"  # preferring accepts a fallback


def _kernel_policy(op: str, kernel: str, mode: str) -> KernelPolicy:
    return KernelPolicy().set(op, kernel, mode)  # type: ignore[arg-type]


def _outcome(run: Callable[[], ExecutionRecord | None], op: str) -> str:
    """Run one side; classify what happened to ``op``'s kernel entry."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            record = run()
        except UnsupportedOperationError:
            return "raises"
        except PolicyConflictError:
            return "conflict"
    assert record is not None
    modes = {f.mode for f in record.fallbacks if f.what == f"kernel for {op}"}
    assert len(modes) <= 1, record.fallbacks
    warned = any(
        issubclass(w.category, FallbackWarning) and f"kernel for {op}" in str(w.message)
        for w in caught
    )
    outcome = modes.pop() if modes else "honoured"
    assert warned == (outcome == "warn"), (outcome, [str(w.message) for w in caught])
    return outcome


def _honours(engine: str, op: str, kernel: str, device: str) -> bool:
    return vocabulary.engine_tables()[engine].honours(op, kernel, device)


def _conflicts(op: str, kernel: str, mode: str, device: str) -> bool:
    """The shared policy pre-check, the same on both sides: a pin naming a kernel that does
    not run on an explicit device."""
    spec = vocabulary.find_kernel(op, kernel)
    return mode == "pin" and device not in spec.devices


# -- inference ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model holding every policy op: MatMul, MultiHeadAttention, LayerNormalization, Conv,
    SkipSimplifiedLayerNormalization (RMSNorm) and Gemm (linear)."""
    f = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("a", f, [2, 8]),
        helper.make_tensor_value_info("b", f, [8, 4]),
        helper.make_tensor_value_info("q", f, [1, 4, 8]),
        helper.make_tensor_value_info("x", f, [2, 8]),
        helper.make_tensor_value_info("image", f, [1, 1, 5, 5]),
        helper.make_tensor_value_info("r", f, [2, 8]),
        helper.make_tensor_value_info("features", f, [2, 8]),
    ]
    outputs = [
        helper.make_tensor_value_info("mm", f, [2, 4]),
        helper.make_tensor_value_info("att", f, [1, 4, 8]),
        helper.make_tensor_value_info("ln", f, [2, 8]),
        helper.make_tensor_value_info("conv", f, [1, 1, 3, 3]),
        helper.make_tensor_value_info("rms", f, [2, 8]),
        helper.make_tensor_value_info("lin", f, [2, 4]),
    ]
    initializers = [
        helper.make_tensor("scale", f, [8], [1.0] * 8),
        helper.make_tensor("bias", f, [8], [0.0] * 8),
        helper.make_tensor("weight", f, [1, 1, 3, 3], [0.1] * 9),
        helper.make_tensor("linear_weight", f, [4, 8], [0.1] * 32),
        helper.make_tensor("linear_bias", f, [4], [0.0] * 4),
    ]
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["mm"]),
        helper.make_node(
            "MultiHeadAttention", ["q", "q", "q"], ["att"], domain="com.microsoft", num_heads=2
        ),
        helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], axis=-1),
        helper.make_node("Conv", ["image", "weight"], ["conv"]),
        helper.make_node(
            "SkipSimplifiedLayerNormalization", ["r", "x", "scale"], ["rms"], domain="com.microsoft"
        ),
        helper.make_node("Gemm", ["features", "linear_weight", "linear_bias"], ["lin"], transB=1),
    ]
    graph = helper.make_graph(nodes, "policy_ops", inputs, outputs, initializers)
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=9,
    )
    onnx.checker.check_model(proto)
    path = tmp_path_factory.mktemp("parity") / "policy_ops.onnx"
    onnx.save(proto, path)
    return path


def _inference_session(model: Path, kernel: KernelPolicy, fallback: str, device: str) -> Any:
    policy = ExecutionPolicy(fallback=fallback)  # type: ignore[arg-type]
    session = InferenceSession(
        model, device=device, engine="onnxruntime", kernel_policy=kernel, exec_policy=policy
    )
    return session.record()


def _inference_mapping_for_cuda(model: Path, kernel: KernelPolicy, fallback: str) -> Any:
    """What the onnxruntime engine decides for its CUDA provider (no GPU needed)."""
    policy = ExecutionPolicy(device="cuda", fallback=fallback, kernel_policy=kernel)  # type: ignore[arg-type]
    record = ExecutionRecord(kind="inference")
    apply_kernel_policy(
        kernel,
        engine="onnxruntime",
        device="cuda:0",
        op_types={node.op_type for node in onnx.load(model).graph.node},
        support=kernel_support(CUDA_EP),
        decisions=Decisions(policy, record=record),
    )
    return record


# -- training ----------------------------------------------------------------------------


def _run_op(op: str, device: str) -> None:
    """One step of ``op`` on ``device`` tensors, through what a training step calls."""
    torch.manual_seed(0)
    half = torch.float16 if device == "cuda" else torch.float32
    if op == "matmul":
        a = torch.randn(16, 16, device=device)
        (a @ a).sum()
    elif op == "attention":  # a shape and dtype every SDPA backend serves on a GPU
        q = torch.randn(2, 4, 128, 64, device=device, dtype=half)
        xrt_torch.ops.fused_attention(q, q, q)
    elif op == "layernorm":
        xrt_torch.ops.fused_layernorm(torch.randn(4, 32, device=device), [32])
    elif op == "rmsnorm":
        xrt_torch.ops.fused_rmsnorm(torch.randn(4, 32, device=device), [32])
    elif op == "linear":
        x = torch.randn(4, 32, device=device)
        xrt_torch.ops.fused_linear(x, torch.randn(16, 32, device=device), None, "relu")
    elif op == "conv":
        F.conv2d(torch.randn(1, 3, 16, 16, device=device), torch.randn(4, 3, 3, 3, device=device))


@pytest.fixture
def training() -> Iterator[None]:
    yield
    xrt_torch.clear_kernel_policy()


def _training_step(
    op: str, kernel: KernelPolicy, fallback: str, device: str, *, policy_device: str = "auto"
) -> Any:
    """set_kernel_policy() as a user calls it, then one step on ``device`` tensors."""
    execution = ExecutionPolicy(device=policy_device, fallback=fallback)  # type: ignore[arg-type]
    xrt_torch.set_kernel_policy(kernel, exec_policy=execution)
    return xrt_torch.explain(_run_op, op, device)


def _training_mapping_for_cuda(kernel: KernelPolicy, fallback: str) -> Any:
    """What the PyTorch extension decides for a CUDA device (no GPU needed)."""
    policy = ExecutionPolicy(device="cuda", fallback=fallback, kernel_policy=kernel)  # type: ignore[arg-type]
    record = ExecutionRecord(kind="training")
    decisions = Decisions.for_policy(policy, record=record)
    record_unapplicable(plan(kernel, None, frozenset({"cuda"})), decisions)
    return record


# -- the table ---------------------------------------------------------------------------


def _check(
    op: str, kernel: str, mode: str, fallback: str, device: str, inference: str, training: str
) -> None:
    want_inference = expected(_honours("onnxruntime", op, kernel, device), mode, fallback)
    want_training = expected(_honours("torch", op, kernel, device), mode, fallback)
    if device == "cuda" and _conflicts(op, kernel, mode, device):
        want_inference = want_training = "conflict"
    assert (inference, training) == (want_inference, want_training)
    if _honours("onnxruntime", op, kernel, device) == _honours("torch", op, kernel, device):
        assert inference == training


@pytest.mark.skipif(HAS_CUDA, reason="device 'auto' is the CPU only on a machine without CUDA")
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cpu_column(case: tuple[tuple[str, str], str, str], model: Path, training: None) -> None:
    (op, kernel), mode, fallback = case
    policy = _kernel_policy(op, kernel, mode)
    inference = _outcome(lambda: _inference_session(model, policy, fallback, "auto"), op)
    trained = _outcome(lambda: _training_step(op, policy, fallback, "cpu"), op)
    _check(op, kernel, mode, fallback, "cpu", inference, trained)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cuda_column_as_the_mappings_decide(
    case: tuple[tuple[str, str], str, str], model: Path
) -> None:
    (op, kernel), mode, fallback = case
    policy = _kernel_policy(op, kernel, mode)
    inference = _outcome(lambda: _inference_mapping_for_cuda(model, policy, fallback), op)
    trained = _outcome(lambda: _training_mapping_for_cuda(policy, fallback), op)
    _check(op, kernel, mode, fallback, "cuda", inference, trained)


@pytest.mark.skipif(HAS_CUDA, reason="the issue's case is a machine without CUDA")
def test_the_issues_case_raises_on_both_sides(model: Path, training: None) -> None:
    """KernelPolicy(matmul="cublasLt") + fallback="error" on a CPU machine: both raise, and
    under 'warn' explain() no longer shows the CPU matmul with no fallback."""
    strict = ExecutionPolicy(fallback="error")
    policy = KernelPolicy(matmul="cublasLt")
    with pytest.raises(UnsupportedOperationError, match="pins matmul='cublasLt'"):
        InferenceSession(model, kernel_policy=policy, exec_policy=strict)
    with pytest.raises(UnsupportedOperationError, match="pins matmul='cublasLt'"):
        xrt_torch.set_kernel_policy(policy, exec_policy=strict)
    with pytest.warns(FallbackWarning, match="kernel for matmul"):
        xrt_torch.set_kernel_policy(policy)
    record = xrt_torch.explain(_run_op, "matmul", "cpu")
    assert any(node.name == "aten::mm" and node.chosen == "cpu" for node in record.nodes)
    (fallback,) = record.fallbacks
    assert (fallback.what, fallback.requested, fallback.mode) == (
        "kernel for matmul",
        "cublasLt",
        "warn",
    )


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(
    HAS_CUDA and not HAS_ORT_CUDA,
    reason="ONNX Runtime has no CUDA execution provider (onnxruntime-gpu: xpuruntime[cuda])",
)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cuda_column_on_a_gpu(
    case: tuple[tuple[str, str], str, str], model: Path, training: None
) -> None:
    (op, kernel), mode, fallback = case
    policy = _kernel_policy(op, kernel, mode)
    inference = _outcome(lambda: _inference_session(model, policy, fallback, "cuda"), op)
    trained = _outcome(
        lambda: _training_step(op, policy, fallback, "cuda", policy_device="cuda"), op
    )
    _check(op, kernel, mode, fallback, "cuda", inference, trained)
