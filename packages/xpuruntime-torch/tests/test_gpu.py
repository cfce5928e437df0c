"""On a CUDA GPU: the policy really changes what runs, graphs replay, the pool allocates."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xpuruntime.pytorch as xrt_torch
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.errors import UnsupportedOperationError

pytestmark = [
    pytest.mark.gpu,
    # PyTorch's autograd device thread warns once when it creates its cuBLAS handle before
    # a context is current on that thread; it then sets the primary context itself.
    pytest.mark.filterwarnings(
        "ignore:Attempting to run cuBLAS, but there was no current CUDA context:UserWarning"
    ),
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"needs a CUDA GPU; torch {torch.__version__} sees none",
    ),
]


def _libraries(record, op: str) -> set[str | None]:  # type: ignore[no-untyped-def]
    return {kernel.library for kernel in record.kernels if kernel.op == op}


def test_cublaslt_policy_runs_cublaslt_kernels() -> None:
    # Half precision: on Hopper cuBLASLt runs its nvjet kernels. (cuBLAS itself dispatches
    # into cuBLASLt's kernels for many shapes, so names alone cannot tell the API apart:
    # the record's read-back of preferred_blas_library is the verification of the switch.)
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    with xrt_torch.kernel_policy(matmul="cublasLt") as applied:
        assert applied.settings[0].applied == {"preferred_blas_library": "cublaslt"}
        assert applied.settings[0].honoured
        record = xrt_torch.explain(lambda: a @ a)
    assert "cublasLt" in _libraries(record, "matmul"), record.kernels


def test_flash_v2_policy_runs_the_flash_kernel() -> None:
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    with xrt_torch.kernel_policy(attention="flash_v2"):
        record = xrt_torch.explain(lambda: xrt_torch.ops.fused_attention(q, k, v, is_causal=True))
        direct = xrt_torch.explain(lambda: F.scaled_dot_product_attention(q, k, v))
    attention_libraries = {"flash_attention", "efficient_attention", "cudnn_attention"}
    assert _libraries(record, "attention") & attention_libraries == {"flash_attention"}
    assert _libraries(direct, "attention") & attention_libraries == {"flash_attention"}
    assert record.fallbacks == []
    assert record.decisions[-1].kernel == "flash_v2"


def test_flash_v2_pinned_raises_for_a_shape_it_cannot_serve() -> None:
    # FlashAttention-2 takes fp16/bf16 only: float32 inputs cannot run on it.
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda") for _ in range(3))
    with xrt_torch.kernel_policy(
        attention="flash_v2", exec_policy=ExecutionPolicy(fallback="error")
    ):
        with pytest.raises(UnsupportedOperationError, match="PyTorch says") as info:
            xrt_torch.ops.fused_attention(q, k, v)
        assert "dtype" in str(info.value).lower() or "float" in str(info.value).lower()
        # plain SDPA cannot fall back either: only the flash backend is enabled (PyTorch
        # 2.11 says "Invalid backend" here, other releases "No available kernel")
        with pytest.raises(RuntimeError, match=r"Invalid backend|No available kernel"):
            F.scaled_dot_product_attention(q, k, v)


_SDPA_BACKENDS = {"flash_v2": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                  "cudnn": "CUDNN_ATTENTION"}  # fmt: skip


@pytest.mark.parametrize("kernel", sorted(_SDPA_BACKENDS))
@pytest.mark.parametrize(
    ("head_dim", "seq", "masked", "causal"),
    [(128, 256, False, True), (64, 200, False, False), (72, 256, False, True),
     (64, 200, True, False)],
)  # fmt: skip
def test_pinned_sdpa_backend_runs_its_aten_entry_point_as_sdpa_does(
    kernel: str, head_dim: int, seq: int, masked: bool, causal: bool
) -> None:
    # The same backend kernel, called directly: output and gradients equal SDPA's when it is
    # restricted to that backend; head dims off the multiple of 8 (flash pads them), boolean
    # masks with rows off the 16-element alignment (the memory-efficient kernel's).
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    mask = torch.rand(seq, seq, device="cuda") > 0.3 if masked else None
    grad = torch.randn(2, 4, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    backend = getattr(SDPBackend, _SDPA_BACKENDS[kernel])
    try:
        with sdpa_kernel([backend]):
            expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    except RuntimeError as error:
        with (
            xrt_torch.kernel_policy(attention=kernel, exec_policy=ExecutionPolicy(fallback="error")),
            pytest.raises(UnsupportedOperationError, match="refuses this call"),
        ):  # fmt: skip
            xrt_torch.ops.fused_attention(q, k, v, attn_mask=mask, is_causal=causal)
        pytest.skip(f"{kernel} cannot serve this case through SDPA either: {error}")
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad)
    with xrt_torch.kernel_policy(attention=kernel) as record:
        got = xrt_torch.ops.fused_attention(q, k, v, attn_mask=mask, is_causal=causal)
        got_grads = torch.autograd.grad(got, (q, k, v), grad)
        with torch.no_grad():
            inference = xrt_torch.ops.fused_attention(q, k, v, attn_mask=mask, is_causal=causal)
    assert record.fallbacks == []
    assert {d.kernel for d in record.decisions if d.op == "attention"} == {kernel}
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(inference, expected, atol=2e-3, rtol=2e-3)
    for ours, theirs in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)


def test_pinned_sdpa_backend_under_compile_and_with_dropout() -> None:
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )

    def block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return xrt_torch.ops.fused_attention(q, k, v, is_causal=True)

    with xrt_torch.kernel_policy(attention="flash_v2") as record:
        eager = block(q, k, v)
        compiled = torch.compile(block, fullgraph=True)(q, k, v)
        compiled.sum().backward()
        # Dropout in training: the backward uses the forward's RNG state (no recomputation).
        dropped = xrt_torch.ops.fused_attention(q, k, v, dropout_p=0.5)
        dropped.sum().backward()
    torch.testing.assert_close(compiled, eager)
    assert q.grad is not None
    assert torch.isfinite(q.grad).all()
    assert record.fallbacks == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_layernorm_runs_the_core_cuda_kernel(dtype: torch.dtype) -> None:
    x = torch.randn(64, 1024, device="cuda", dtype=dtype, requires_grad=True)
    weight = torch.randn(1024, device="cuda", dtype=dtype, requires_grad=True)
    bias = torch.randn(1024, device="cuda", dtype=dtype, requires_grad=True)
    with xrt_torch.kernel_policy(layernorm="xrt") as record:
        out = xrt_torch.ops.fused_layernorm(x, [1024], weight, bias)
        out.float().pow(2).sum().backward()
        assert record.decisions[-1].kernel == "xrt"
        assert record.decisions[-1].device == "cuda:0"
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype != torch.float32 else {}
    torch.testing.assert_close(out, F.layer_norm(x, [1024], weight, bias), **tolerance)
    assert x.grad is not None
    assert weight.grad is not None


def _mlp_step(seed: int) -> tuple[torch.nn.Module, Callable[..., torch.Tensor]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, step


def test_graph_replay_gives_the_same_losses_as_eager() -> None:
    torch.manual_seed(1)
    batches = [
        (torch.randn(32, 64, device="cuda"), torch.randn(32, 1, device="cuda")) for _ in range(6)
    ]
    with xrt_torch.kernel_policy(exec_policy=ExecutionPolicy(precision="fp32")):
        _, eager_step = _mlp_step(0)
        eager = [eager_step(*batches[0]).item() for _ in range(3)]  # = graph_step's warm-up
        eager += [eager_step(*batch).item() for batch in batches[1:]]
        _, step = _mlp_step(0)
        graphed = xrt_torch.graph_step(step, batches[0], warmup_iters=3)
        assert graphed.graphed
        replayed = [graphed(*batch).item() for batch in batches[1:]]
    torch.testing.assert_close(replayed, eager[3:], rtol=1e-5, atol=1e-6)


def test_capture_graph_context_replays_the_block() -> None:
    x = torch.ones(1024, device="cuda")
    y = x * 2  # warm-up
    with xrt_torch.capture_graph() as graph:
        y = x * 2
    x.fill_(3)
    graph.replay()
    torch.cuda.synchronize()
    assert graph.captured
    assert torch.all(y == 6)


def test_profile_trace_holds_kernels_and_core_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import xpuruntime.runtime as rt

    path = tmp_path / "trace.json"
    a = torch.randn(256, 256, device="cuda")
    with xrt_torch.profile(export_chrome_trace=path), rt.profiler.range("user.step"):
        (a @ a).sum()
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)
    assert any(e.get("name") == "user.step" for e in events)


ALLOCATOR_LOOP = textwrap.dedent(
    """
    import json, torch
    import xpuruntime.pytorch as xrt_torch
    xrt_torch.set_allocator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256, device="cuda"); y = torch.randint(0, 10, (512,), device="cuda")
    losses = []
    for _ in range(50):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward(); optimizer.step(); losses.append(loss.item())
    try:
        xrt_torch.reset_allocator()
        reset_error = None
    except Exception as error:
        reset_error = type(error).__name__ + ": " + str(error)
    print(json.dumps({"losses": losses, "stats": xrt_torch.allocator_stats(),
                      "reset_error": reset_error}))
    """
)


def test_pluggable_allocator_serves_a_training_loop() -> None:
    result = subprocess.run(
        [sys.executable, "-c", ALLOCATOR_LOOP], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["losses"][-1] < report["losses"][0]
    stats = report["stats"]
    assert stats["allocations"] > 50
    assert stats["peak_reserved"] > 0
    assert stats["cache_hits"] > 0  # the pool reuses blocks across steps
    assert "already initialised CUDA" in report["reset_error"]


def test_set_allocator_after_cuda_init_explains_the_order() -> None:
    torch.zeros(1, device="cuda")
    with pytest.raises(xrt_torch.errors.AllocatorError, match="first thing in a fresh process"):
        xrt_torch.set_allocator()


def test_explain_catches_ops_running_where_their_pinned_kernel_does_not() -> None:
    """Set on a GPU machine, the policy is decided for CPU and CUDA; the step decides."""
    strict = ExecutionPolicy(fallback="error")
    cpu = torch.randn(64, 64)
    gpu = cpu.cuda()
    with xrt_torch.kernel_policy(matmul="cublasLt", exec_policy=strict):
        xrt_torch.explain(lambda: gpu @ gpu)  # cuBLASLt can serve this one
        with pytest.raises(UnsupportedOperationError, match=r"pins matmul='cublasLt'.*ran on cpu"):
            xrt_torch.explain(lambda: cpu @ cpu)
    with xrt_torch.kernel_policy(matmul="cpu", exec_policy=strict):
        xrt_torch.explain(lambda: cpu @ cpu)
        with pytest.raises(UnsupportedOperationError, match=r"pins matmul='cpu'.*ran on cuda"):
            xrt_torch.explain(lambda: gpu @ gpu)
    allow = ExecutionPolicy(fallback="allow")
    with xrt_torch.kernel_policy(conv="onednn", exec_policy=allow):
        image = torch.randn(1, 3, 16, 16, device="cuda")
        record = xrt_torch.explain(lambda: F.conv2d(image, torch.randn(4, 3, 3, 3, device="cuda")))
    assert any(f.what == "kernel for conv" and f.mode == "allow" for f in record.fallbacks)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_fused_linear_on_cublaslt_matches_pytorch_gradients(dtype: torch.dtype, activation) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime.pytorch.ops import fused_linear

    torch.manual_seed(0)
    x = torch.randn(4, 33, 96, device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(100, 96, device="cuda", dtype=dtype) / 10).requires_grad_()
    b = torch.randn(100, device="cuda", dtype=dtype, requires_grad=True)
    with xrt_torch.kernel_policy(linear="cublasLt"):
        y = fused_linear(x, w, b, activation)
        y.float().square().sum().backward()
        decision = [d for d in xrt_torch.current_record().decisions if d.op == "linear"][-1]
        assert decision.kernel == "cublasLt"
    ours = [y.detach(), x.grad, w.grad, b.grad]

    def pytorch(*leaves: torch.Tensor) -> list[torch.Tensor]:
        leaves = tuple(t.detach().requires_grad_() for t in leaves)
        z = F.linear(*leaves)
        out = {None: z, "relu": F.relu(z), "gelu": F.gelu(z, approximate="tanh")}[activation]
        out.float().square().sum().backward()
        return [out.detach(), *(t.grad for t in leaves)]

    theirs = pytorch(x, w, b)
    exact = pytorch(x.double(), w.double(), b.double())  # the yardstick for both

    def error(a: torch.Tensor, ref: torch.Tensor) -> float:
        return float((a.double() - ref).norm() / ref.norm())

    # Same function, rounding aside: our error against float64 is no worse than PyTorch's own
    # (bf16 gradient sums cancel, so element-wise tolerances would test the rounding).
    for name, a, p, ref in zip(("y", "dx", "dw", "db"), ours, theirs, exact, strict=True):
        assert error(a, ref) <= 2 * error(p, ref) + 1e-5, (name, error(a, ref), error(p, ref))


def test_fused_linear_compiles_on_cuda() -> None:
    from xpuruntime.pytorch.ops import fused_linear

    torch._dynamo.reset()
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with xrt_torch.kernel_policy(linear="cublasLt"):
        out = torch.compile(lambda t: fused_linear(t, w, b, "gelu"), fullgraph=True)(x)
        out.float().sum().backward()
    ref = F.gelu(F.linear(x, w, b), approximate="tanh")
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-1)
    assert w.grad is not None
    assert b.grad is not None
