"""CPU behaviour of the CUDA-only features: graphs, allocator; plus profile and explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import xpuruntime.pytorch as xrt_torch
import xpuruntime.runtime as rt
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.pytorch.errors import AllocatorError
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import FallbackWarning

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


def _model_and_step():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, step


@no_cuda
def test_graph_step_without_cuda_raises_under_fallback_error() -> None:
    _, step = _model_and_step()
    with (
        xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(fallback="error")),
        pytest.raises(FallbackError, match="CUDA graphs need a CUDA device"),
    ):
        xrt_torch.graph_step(step, (torch.randn(4, 8), torch.randn(4, 1)))


@no_cuda
def test_graph_step_without_cuda_runs_eagerly_and_records_under_allow() -> None:
    _, step = _model_and_step()
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(fallback="allow")) as record:
        graphed = xrt_torch.graph_step(step, (x, y))
        first = graphed(x, y).item()
        second = graphed(x, y).item()
    assert not graphed.graphed
    assert second < first  # it really trains
    assert record.fallbacks[0].what == "cuda_graph"
    assert record.fallbacks[0].chosen == "eager"


@no_cuda
def test_capture_graph_without_cuda_warns_and_cannot_replay() -> None:
    with pytest.warns(FallbackWarning, match="cuda_graph"), xrt_torch.capture_graph() as graph:
        torch.ones(2).sum()
    assert not graph.captured
    with pytest.raises(UnsupportedOperationError, match="nothing to replay"):
        graph.replay()


def test_graph_step_rejects_zero_warmup() -> None:
    _, step = _model_and_step()
    with pytest.raises(ValueError, match="warmup_iters must be >= 1"):
        xrt_torch.graph_step(step, (torch.randn(4, 8), torch.randn(4, 1)), warmup_iters=0)


@no_cuda
def test_set_allocator_without_cuda_says_why() -> None:
    with pytest.raises(AllocatorError, match="sees no CUDA device"):
        xrt_torch.set_allocator()
    assert not xrt_torch.is_allocator_set()
    assert "reserved" in xrt_torch.allocator_stats()


def test_profile_merges_core_events_into_the_torch_trace(tmp_path: Path) -> None:
    trace_path = tmp_path / "trace.json"
    with (
        xrt_torch.profile(export_chrome_trace=trace_path) as session,
        rt.profiler.range("user.step"),
    ):
        torch.randn(64, 64) @ torch.randn(64, 64)
    trace = json.loads(trace_path.read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "user.step" in names  # the core's range
    assert "aten::mm" in names  # PyTorch's op
    core = next(e for e in trace["traceEvents"] if e.get("name") == "user.step")
    torch_mm = next(e for e in trace["traceEvents"] if e.get("name") == "aten::mm")
    # aligned clocks: the matmul ran inside the core's range
    assert core["ts"] <= torch_mm["ts"] <= core["ts"] + core.get("dur", 0) + 1e3
    assert session.core_events()


def test_explain_cpu_step_names_the_operators_that_ran() -> None:
    _model, step = _model_and_step()
    q = torch.randn(1, 2, 8, 4)
    with xrt_torch.kernel_policy(attention="math"):
        record = xrt_torch.explain(
            lambda: (
                step(torch.randn(4, 8), torch.randn(4, 1)),
                xrt_torch.ops.fused_attention(q, q, q),
            )
        )
    assert record.kind == "training"
    ops = {node.op_type: node for node in record.nodes}
    assert "matmul" in ops
    assert "attention" in ops
    assert "math" in ops["attention"].kernel  # aten::_scaled_dot_product_attention_math
    assert ops["attention"].requested == "math"
    assert record.runs[0].latency_ms > 0
    assert any(d.op == "attention" and d.kernel == "math" for d in record.decisions)


def test_explain_catches_a_step_running_where_the_pinned_kernel_does_not() -> None:
    """Decided for CUDA, run on the CPU: the step's matmuls cannot be cuBLAS."""
    _model, step = _model_and_step()
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    strict = ExecutionPolicy(device="cuda", fallback="error")
    with (
        xrt_torch.kernel_policy(matmul="cublas", exec_policy=strict),
        pytest.raises(UnsupportedOperationError, match=r"pins matmul='cublas'.*ran on cpu"),
    ):
        xrt_torch.explain(step, x, y)
    allow = ExecutionPolicy(device="cuda", fallback="allow")
    with xrt_torch.kernel_policy(matmul="cublas", exec_policy=allow):
        record = xrt_torch.explain(step, x, y)
    matmuls = [node for node in record.nodes if node.op_type == "matmul"]
    assert matmuls
    assert all(node.placement == "fallback" and node.chosen == "cpu" for node in matmuls)
    assert {f.what for f in record.fallbacks} == {"kernel for matmul"}
    assert all(f.mode == "allow" and f.requested == "cublas" for f in record.fallbacks)
