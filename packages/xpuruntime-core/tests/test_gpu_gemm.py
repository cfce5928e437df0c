"""GEMMs on the GPU machine: cuBLASLt/cuBLAS at every transpose, dtype, TF32 and batches,
fused epilogues and their backward helpers against PyTorch, and the lock hooks with real
cuBLASLt algorithms (AlgoInit + AlgoCheck)."""

from __future__ import annotations

import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.native import core


def _gpu_skip_reason() -> str | None:
    if core().cuda_device_count() > 0:
        return None
    return f"needs an NVIDIA GPU and a CUDA build of xpuruntime-core: {core().cuda_unavailable_reason()}"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpu_skip_reason() is not None, reason=_gpu_skip_reason() or ""),
]

TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
LT = KernelPolicy(linear="cublasLt")


@pytest.fixture(scope="module")
def torch():  # type: ignore[no-untyped-def]
    return pytest.importorskip("torch", reason="PyTorch with CUDA is needed for the comparisons")


def _operand(torch, rows: int, cols: int, transposed: bool, dtype, batch: int = 0):  # type: ignore[no-untyped-def]
    """A [rows, cols] (or [batch, rows, cols]) CUDA tensor, stored transposed if asked."""
    lead = (batch,) if batch else ()
    if transposed:
        return torch.randn(*lead, cols, rows, device="cuda", dtype=dtype).transpose(-1, -2)
    return torch.randn(*lead, rows, cols, device="cuda", dtype=dtype)


def _close(torch, got, ref, dtype_name: str) -> None:  # type: ignore[no-untyped-def]
    tol = TOL[dtype_name]
    torch.testing.assert_close(got.float(), ref.float(), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("kernel", ["cublasLt", "cublas"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_every_transpose_combination(torch, kernel: str, dtype_name: str, layout: str) -> None:  # type: ignore[no-untyped-def]
    dtype = getattr(torch, dtype_name)
    a = _operand(torch, 129, 67, layout[0] == "T", dtype)
    b = _operand(torch, 67, 45, layout[1] == "T", dtype)
    c = ops.matmul(a, b, policy=KernelPolicy(matmul=kernel))
    _close(torch, c, a.float() @ b.float(), dtype_name)
    decision = ops.last_decision()
    assert decision is not None
    assert decision.layout == layout
    assert decision.kernel == kernel


def test_transpose_of_itself_takes_no_copy(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(300, 200, device="cuda")
    _close(torch, ops.matmul(a.T, a), a.T @ a, "float32")
    assert ops.last_decision().layout == "TN"  # type: ignore[union-attr]


@pytest.mark.parametrize("kernel", ["cublasLt", "cublas"])
def test_batched_and_broadcast(torch, kernel: str) -> None:  # type: ignore[no-untyped-def]
    policy = KernelPolicy(matmul=kernel)
    a = torch.randn(4, 33, 17, device="cuda", dtype=torch.bfloat16)
    b = _operand(torch, 17, 9, True, torch.bfloat16, batch=4)
    _close(torch, ops.matmul(a, b, policy=policy), a.float() @ b.float(), "bfloat16")
    assert ops.last_decision().shape == "[4, 33, 17, 9]"  # type: ignore[union-attr]
    w = torch.randn(17, 9, device="cuda", dtype=torch.bfloat16)
    _close(torch, ops.matmul(a, w, policy=policy), a.float() @ w.float(), "bfloat16")
    assert ops.last_decision().shape == "[132, 17, 9]"  # type: ignore[union-attr]  # folded


def test_tf32_precision_uses_the_fast_compute_type(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(512, 256, device="cuda")
    b = torch.randn(256, 128, device="cuda")
    c = ops.matmul(a, b, policy=KernelPolicy(matmul="cublasLt"), precision="tf32")
    assert ops.last_decision().layout == "NN:tf32"  # type: ignore[union-attr]
    torch.testing.assert_close(c, a @ b, rtol=5e-3, atol=5e-2)


def test_other_strides_name_contiguous(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(64, 64, device="cuda")[::2, ::2]
    with pytest.raises(rt.UnsupportedOperationError, match=r"call \.contiguous\(\)"):
        ops.matmul(a, a, policy=KernelPolicy(matmul="cublasLt"))
    with pytest.raises(rt.UnsupportedOperationError, match=r"\.contiguous\(\)"):
        ops.matmul(a, a)  # auto: no CUDA kernel takes it, and the reasons say why


def test_algorithm_choice_is_recorded_with_its_candidates(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    ops.matmul(a, a, policy=KernelPolicy(matmul="cublasLt"))
    (entry,) = rt.dispatcher.export_decisions()
    algorithm = entry["algorithm"]
    assert set(algorithm) == {
        "algo_id", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "inner_shape",
        "cluster_shape", "workspace",
    }  # fmt: skip
    timed = [c for c in entry["candidates"] if "algorithm" in c]
    assert timed, entry["detail"]
    assert all(c["ms"] > 0 and c["rank"] >= 0 for c in timed)
    fastest = min(timed, key=lambda c: c["ms"])
    assert fastest["algorithm"] == algorithm
    assert "heuristic rank" in entry["detail"]


EPILOGUES = [
    (None, True),
    (None, False),
    ("relu", True),
    ("relu", False),
    ("gelu", True),
    ("gelu", False),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("activation", "with_bias"), EPILOGUES)
def test_linear_epilogues_match_torch(torch, dtype_name: str, activation, with_bias: bool) -> None:  # type: ignore[no-untyped-def]
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = torch.randn(3, 50, 96, device="cuda", dtype=dtype)
    w = torch.randn(72, 96, device="cuda", dtype=dtype) / 10
    b = torch.randn(72, device="cuda", dtype=dtype) if with_bias else None
    y = ops.linear(x, w, b, activation, policy=LT)
    z = F.linear(x.float(), w.float(), None if b is None else b.float())
    ref = {None: z, "relu": F.relu(z), "gelu": F.gelu(z, approximate="tanh")}[activation]
    _close(torch, y, ref, dtype_name)
    assert ops.last_decision().kernel == "cublasLt"  # type: ignore[union-attr]


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_gelu_aux_and_backward_epilogues_match_autograd(torch, dtype_name: str) -> None:  # type: ignore[no-untyped-def]
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = torch.randn(64, 96, device="cuda", dtype=dtype, requires_grad=True)
    w1 = (
        torch.randn(100, 96, device="cuda", dtype=dtype) / 10
    ).requires_grad_()  # N=100: padded aux
    b1 = torch.randn(100, device="cuda", dtype=dtype, requires_grad=True)
    w2 = (torch.randn(40, 100, device="cuda", dtype=dtype) / 10).requires_grad_()
    z = F.linear(x, w1, b1)
    h = F.gelu(z, approximate="tanh")
    out = F.linear(h, w2)
    g = torch.randn_like(out)
    out.backward(g)

    with torch.no_grad():
        y, pre = ops.linear(x, w1, b1, "gelu", save_preactivation=True, policy=LT)
        _close(torch, pre, z, dtype_name)
        _close(torch, y, h, dtype_name)
        assert pre.stride(0) % 8 == 0
        dz, db1 = ops.linear_gelu_grad(g, w2, pre, policy=LT)  # DGELU_BGRAD
        assert ops.last_decision().layout == "NN+DGELU_BGRAD"  # type: ignore[union-attr]
        dw1, db1_again = ops.linear_weight_grad(dz, x, policy=LT)  # BGRADB
        assert ops.last_decision().layout == "TN+BGRADB"  # type: ignore[union-attr]
        dx = ops.matmul(dz, w1)
    _close(torch, db1, b1.grad, dtype_name)
    _close(torch, db1_again, b1.grad, dtype_name)
    _close(torch, dw1, w1.grad, dtype_name)
    _close(torch, dx, x.grad, dtype_name)


def test_activation_grad_on_cuda(torch) -> None:  # type: ignore[no-untyped-def]
    F = torch.nn.functional
    z = torch.randn(37, 50, device="cuda", requires_grad=True)
    dy = torch.randn(37, 50, device="cuda")
    F.gelu(z, approximate="tanh").backward(dy)
    got = ops.activation_grad(dy, z.detach(), "gelu")
    torch.testing.assert_close(got, z.grad, rtol=1e-5, atol=1e-5)


def test_lock_replays_the_exported_algorithm(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(768, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    ref = ops.matmul(a, b, policy=KernelPolicy(matmul="cublasLt"))
    entries = rt.dispatcher.export_decisions()
    try:
        assert rt.dispatcher.set_lock("replay", entries) == []
        got = ops.matmul(a, b, policy=KernelPolicy(matmul="cublasLt"))
        torch.testing.assert_close(got, ref)
        (replayed,) = rt.dispatcher.export_decisions()
        assert replayed["status"] == "locked"
        # The configuration comes back identical; the workspace is what AlgoCheck reports.
        locked = {k: v for k, v in entries[0]["algorithm"].items() if k != "workspace"}
        assert {k: v for k, v in replayed["algorithm"].items() if k != "workspace"} == locked
        assert "replayed from the lock" in replayed["detail"]
        assert [c for c in replayed["candidates"] if "algorithm" in c] == []  # nothing timed

        broken = [dict(entries[0], algorithm=dict(entries[0]["algorithm"], algo_id=987654))]
        problems = rt.dispatcher.set_lock("replay", broken)
        assert problems
        assert "locked algorithm rejected" in problems[0]["reason"]
        torch.testing.assert_close(ops.matmul(a, b, policy=KernelPolicy(matmul="cublasLt")), ref)
        (fallen,) = rt.dispatcher.export_decisions()
        assert fallen["status"] == "fallen_back"
        assert any("rejected" in p["reason"] for p in rt.dispatcher.lock_problems())
    finally:
        rt.dispatcher.set_lock("off")
