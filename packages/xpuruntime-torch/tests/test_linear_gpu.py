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


def test_runs_on_the_current_stream_and_in_cuda_graphs() -> None:
    x, w, b = _inputs()
    expected = F.relu(F.linear(x, w, b))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), xrt_torch.kernel_policy(linear="cublasLt"):
        on_stream = fused_linear(x, w, b, "relu")
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(on_stream, expected, atol=3e-2, rtol=2e-2)

    static_x = x.clone()
    with xrt_torch.kernel_policy(linear="cublasLt"):
        fused_linear(static_x, w, b, "relu")  # warm up (and decide) outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = fused_linear(static_x, w, b, "relu")
    static_x.copy_(x * 2)
    graph.replay()
    torch.testing.assert_close(static_y, F.relu(F.linear(x * 2, w, b)), atol=6e-2, rtol=2e-2)


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
