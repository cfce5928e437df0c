"""On a CUDA GPU: the core's LayerNorm/RMSNorm kernels against a float64 reference and
against PyTorch's own kernels (forward and backward, every dtype, odd widths, widths that are
no multiple of the vector, one row, many rows, the residual form), CUDA graphs, streams."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch.ops import (
    fused_add_layernorm,
    fused_add_rmsnorm,
    fused_layernorm,
    fused_rmsnorm,
)
from xpuruntime.runtime.native import core

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or core().cuda_device_count() == 0,
        reason="needs a CUDA GPU and a CUDA build of xpuruntime-core",
    ),
]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rows, h): one warp per row, several warps, the largest vectorised rows, the generic path
# (h % 8 != 0 for 16-bit, h % 4 != 0 for float32, rows too long to vectorise), one row.
SHAPES = [(1, 1024), (7, 1), (33, 100), (257, 1000), (64, 1027), (16, 4096), (9, 12288),
          (5, 16384), (3, 20000), (2, 40000), (16384, 1024)]  # fmt: skip


def _inputs(rows: int, h: int, dtype: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
        values = torch.randn(*shape, device="cuda", generator=generator) * scale + offset
        return values.to(dtype).requires_grad_()

    return {
        "x": rand(rows, h, scale=2.0, offset=0.5),
        "residual": rand(rows, h),
        "weight": rand(h, scale=0.3, offset=1.0),
        "bias": rand(h, scale=0.5),
        "grad": rand(rows, h).detach(),
        "grad_sum": rand(rows, h).detach(),
    }


def _run(norm: str, kernel: str, t: dict[str, torch.Tensor], residual: bool) -> list[torch.Tensor]:
    """[y, (s,) dx, (dresidual,) dweight, (dbias)] as float64.

    ``kernel``: "xrt" (ours), "pytorch" (PyTorch's functions in the input dtype) or
    "reference" (PyTorch's functions in float64)."""
    wide = kernel == "reference"
    inputs = {k: (v.detach().double().requires_grad_() if wide else v) for k, v in t.items()}
    x, weight, bias = inputs["x"], inputs["weight"], inputs["bias"]
    differentiable = [x, weight] + ([bias] if norm == "layernorm" else [])
    if residual:
        differentiable.insert(1, inputs["residual"])
    h = x.shape[-1]
    if kernel == "xrt":
        with xrt_torch.kernel_policy(**{norm: kernel}):
            if norm == "layernorm" and residual:
                outputs = list(fused_add_layernorm(x, inputs["residual"], h, weight, bias, 1e-5))
            elif norm == "layernorm":
                outputs = [fused_layernorm(x, h, weight, bias, 1e-5)]
            elif residual:
                outputs = list(fused_add_rmsnorm(x, inputs["residual"], h, weight, 1e-5))
            else:
                outputs = [fused_rmsnorm(x, h, weight, 1e-5)]
    else:
        total = x + inputs["residual"] if residual else x
        y = (
            F.layer_norm(total, [h], weight, bias, 1e-5)
            if norm == "layernorm"
            else F.rms_norm(total, [h], weight, 1e-5)
        )
        outputs = [y, total] if residual else [y]
    grads = [inputs["grad"].to(outputs[0].dtype)]
    if residual:
        grads.append(inputs["grad_sum"].to(outputs[0].dtype))
    computed = torch.autograd.grad(outputs, differentiable, grads)
    return [o.detach().double() for o in outputs] + [g.double() for g in computed]


def _errors(got: list[torch.Tensor], reference: list[torch.Tensor]) -> list[float]:
    """Max |error| of each result, relative to the result's RMS."""
    return [
        float((g - r).abs().max() / (r.pow(2).mean().sqrt() + 1e-12))
        for g, r in zip(got, reference, strict=True)
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("rows", "h"), SHAPES)
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("residual", [False, True])
def test_core_kernels_are_as_accurate_as_pytorch(
    dtype: torch.dtype, rows: int, h: int, norm: str, residual: bool
) -> None:
    t = _inputs(rows, h, dtype)
    reference = _run(norm, "reference", t, residual)
    ours = _errors(_run(norm, "xrt", t, residual), reference)
    theirs = _errors(_run(norm, "pytorch", t, residual), reference)
    floor = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    # Each result within 1.5x of PyTorch's own error, or of the dtype's rounding.
    for mine, pytorch in zip(ours, theirs, strict=True):
        assert mine <= max(1.5 * pytorch, floor), (ours, theirs)


def test_the_record_names_the_core_kernel_on_cuda() -> None:
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    with xrt_torch.kernel_policy(rmsnorm="xrt") as record:
        fused_rmsnorm(x, [1024])
    (decision,) = record.decisions
    assert (decision.kernel, decision.device, decision.dtype) == ("xrt", "cuda:0", "bfloat16")


def test_dweight_is_deterministic() -> None:
    t = _inputs(8192, 2048, torch.bfloat16)
    runs = [_run("layernorm", "xrt", t, residual=False) for _ in range(2)]
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_runs_on_the_current_stream_and_in_cuda_graphs() -> None:
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    expected = F.rms_norm(x.float(), [4096], w.float(), 1e-6)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        on_stream = fused_rmsnorm(x, [4096], w, 1e-6)
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(on_stream.float(), expected, atol=3e-2, rtol=2e-2)

    static_x = x.clone()
    fused_rmsnorm(static_x, [4096], w, 1e-6)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fused_rmsnorm(static_x, [4096], w, 1e-6)
    static_x.copy_(x * 2)
    graph.replay()
    torch.testing.assert_close(
        static_y.float(), F.rms_norm((x * 2).float(), [4096], w.float(), 1e-6), atol=3e-2, rtol=2e-2
    )


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_ops_pass_opcheck_on_cuda(norm: str) -> None:
    t = _inputs(6, 512, torch.bfloat16)
    bias = t["bias"] if norm == "layernorm" else None
    ops: Any = torch.ops.xpuruntime
    torch.library.opcheck(
        getattr(ops, f"fused_add_{norm}").default,
        (t["x"], t["residual"], [512], t["weight"], bias, 1e-5, "xrt", "pin"),
    )


def test_compiled_training_step_matches_eager() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    norm_weight = torch.nn.Parameter(torch.ones(1024, device="cuda", dtype=torch.bfloat16))
    linear = torch.nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16)

    def block(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h, residual = fused_add_rmsnorm(x, residual, [1024], norm_weight, 1e-6)
        return linear(h) + residual

    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    with xrt_torch.kernel_policy(rmsnorm="xrt"):
        eager = block(x, residual)
        compiled = torch.compile(block, fullgraph=True)(x, residual)
    torch.testing.assert_close(compiled, eager, atol=2e-2, rtol=2e-2)


def test_a_training_step_replays_from_a_cuda_graph() -> None:
    # The backward's dweight partial sums live in PyTorch memory, so a captured step owns them.
    x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(2048, device="cuda", dtype=torch.bfloat16).requires_grad_()
    target = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        x.grad, w.grad = None, None
        y = fused_rmsnorm(x, [2048], w, 1e-6)
        ((y.float() - target.float()) ** 2).mean().backward()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), xrt_torch.kernel_policy(rmsnorm="xrt"):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    eager = (x.grad.clone(), w.grad.clone())  # type: ignore[union-attr]
    graph = torch.cuda.CUDAGraph()
    with xrt_torch.kernel_policy(rmsnorm="xrt"), torch.cuda.graph(graph):
        step()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(x.grad, eager[0])
    assert torch.equal(w.grad, eager[1])
