"""On a CUDA GPU: fused_linear's native op on the core's cuBLASLt epilogues: the C++ autograd
node, PyTorch's current stream, CUDA graph capture, opcheck and the decision record."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import fused_linear
from xpuruntime.runtime.native import core

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or core().cuda_device_count() == 0,
        reason="needs a CUDA GPU and a CUDA build of xpuruntime-core",
    ),
]


def _inputs(dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x = torch.randn(4, 33, 64, device="cuda", dtype=dtype)
    w = torch.randn(96, 64, device="cuda", dtype=dtype) / 8
    b = torch.randn(96, device="cuda", dtype=dtype)
    return x, w, b


def test_training_call_is_a_cpp_node_on_cublaslt_and_recorded_once() -> None:
    x, w, b = (t.requires_grad_() for t in _inputs())
    with xrt_torch.kernel_policy(linear="cublasLt") as record:
        for _ in range(3):
            y = fused_linear(x, w, b, "gelu")
    assert type(y.grad_fn).__name__ == "CppFunction"
    y.float().sum().backward()
    assert [(d.kernel, d.shape) for d in record.decisions if d.op == "linear"] == [
        ("cublasLt", "4x33x64")
    ]
    ref = [t.detach().float().requires_grad_() for t in (x, w, b)]
    F.gelu(F.linear(*ref), approximate="tanh").sum().backward()
    for got, want in zip((x.grad, w.grad, b.grad), (t.grad for t in ref), strict=True):
        assert got is not None
        assert want is not None
        torch.testing.assert_close(got.float(), want, atol=0.25, rtol=5e-2)


def _in_graph_pool(tensor: torch.Tensor, graph: torch.cuda.CUDAGraph) -> bool:
    """Whether ``tensor``'s memory is a block of ``graph``'s private pool (PyTorch's caching
    allocator, which a capture makes hand out the graph's own memory)."""
    address = tensor.data_ptr()
    return any(
        tuple(segment["segment_pool_id"]) == tuple(graph.pool())
        and segment["address"] <= address < segment["address"] + segment["total_size"]
        for segment in torch.cuda.memory_snapshot()
    )


def test_runs_on_the_current_stream_and_in_cuda_graphs() -> None:
    x, w, b = _inputs()
    expected = F.relu(F.linear(x, w, b))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), xrt_torch.kernel_policy(linear="cublasLt"):
        on_stream = fused_linear(x, w, b, "relu")
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(on_stream, expected, atol=3e-2, rtol=2e-2)

    # Captured: the forward with GELU's saved pre-activation (the training form, through the
    # op) and the weight gradient with the BGRADB bias gradient. Their outputs are PyTorch's
    # allocations, from the graph's private pool, which replays write into.
    static_x = x.clone()
    dz = torch.randn(4, 33, 96, device="cuda", dtype=x.dtype)
    op = torch.ops.xpuruntime
    with xrt_torch.kernel_policy(linear="cublasLt") as record:
        # Warm up (and decide) outside capture.
        fused_linear(static_x, w, b, "relu")
        op.fused_linear(static_x, w, b, "gelu", "cublasLt", "pin")
        op.fused_linear_weight_grad(dz, static_x, True, "cublasLt", "pin")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = fused_linear(static_x, w, b, "relu")
            static_g, static_z = op.fused_linear(static_x, w, b, "gelu", "cublasLt", "pin")
            static_dw, static_db = op.fused_linear_weight_grad(dz, static_x, True, "cublasLt",
                                                               "pin")  # fmt: skip
    assert {d.kernel for d in record.decisions if d.op == "linear"} == {"cublasLt"}
    for result in (static_y, static_g, static_z, static_dw, static_db):
        assert _in_graph_pool(result, graph)
    # Memory allocated after the capture must not alias the graph's outputs.
    after = fused_linear(x, w, b, "relu")
    for x_in in (x * 2, x * -1):
        static_x.copy_(x_in)
        graph.replay()
        z = F.linear(x_in, w, b)
        torch.testing.assert_close(static_y, F.relu(z), atol=6e-2, rtol=2e-2)
        torch.testing.assert_close(static_g, F.gelu(z, approximate="tanh"), atol=6e-2, rtol=2e-2)
        torch.testing.assert_close(static_z, z, atol=6e-2, rtol=2e-2)
        dz2, x2 = dz.reshape(-1, 96).float(), x_in.reshape(-1, 64).float()
        torch.testing.assert_close(static_dw.float(), dz2.T @ x2, atol=0.5, rtol=5e-2)
        torch.testing.assert_close(static_db.float(), dz2.sum(0), atol=0.25, rtol=5e-2)
    torch.testing.assert_close(after, expected, atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_ops_pass_opcheck_on_cuda(activation: str) -> None:
    x, w, b = (t.float().requires_grad_() for t in _inputs())
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_linear.default, (x, w, b, activation, "cublasLt", "pin")
    )
    dz = torch.randn(4, 33, 96, device="cuda")
    torch.library.opcheck(
        torch.ops.xpuruntime.fused_linear_weight_grad.default,
        (dz, x.detach(), True, "cublasLt", "pin"),
    )
