"""GPU paths (run on the device machine): devices vs torch.cuda, pool reuse, graphs, DLPack
with torch and CuPy CUDA tensors, cuBLAS/cuBLASLt matmul vs torch.matmul."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import xpuruntime.ops as ops
import xpuruntime.runtime as rt
from xpuruntime.policies import BestPerformance, KernelPolicy
from xpuruntime.runtime import memory
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord


def _gpu_skip_reason() -> str | None:
    if core().cuda_device_count() > 0:
        return None
    return f"needs an NVIDIA GPU and a CUDA build of xpuruntime-core: {core().cuda_unavailable_reason()}"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpu_skip_reason() is not None, reason=_gpu_skip_reason() or ""),
]


@pytest.fixture(scope="module")
def torch():  # type: ignore[no-untyped-def]
    return pytest.importorskip("torch", reason="PyTorch with CUDA is needed for the comparisons")


def test_device_list_matches_torch(torch) -> None:  # type: ignore[no-untyped-def]
    devices = [d for d in rt.get_all_devices() if d.kind == "cuda"]
    assert len(devices) == torch.cuda.device_count()
    for d in devices:
        props = torch.cuda.get_device_properties(d.id)
        assert d.name == props.name
        assert d.total_memory == props.total_memory
        assert d.compute_capability == (props.major, props.minor)
        assert d.sm_count == props.multi_processor_count
        assert d.supports_bf16 == (props.major >= 8)
    assert rt.get_current_device().id == torch.cuda.current_device()


def test_pool_reuse_makes_no_new_driver_allocation() -> None:
    sizes = [1 << 10, 1 << 16, 3 << 20, 64 << 20]
    for n in sizes:
        rt.empty([n], "uint8", "cuda")  # freed at once: cached
    before = memory.stats()
    for _ in range(50):
        for n in sizes:
            t = rt.empty([n], "uint8", "cuda")
            del t
    after = memory.stats()
    assert after["driver_allocations"] == before["driver_allocations"]
    assert after["cache_hits"] - before["cache_hits"] == 50 * len(sizes)
    live = [rt.empty([1 << 20], "float32", "cuda") for _ in range(3)]
    stats = memory.stats()
    assert stats["allocated"] >= 3 * (4 << 20)
    assert stats["peak"] >= stats["allocated"]
    del live
    memory.empty_cache()
    assert memory.stats()["cached"] == 0


def test_pool_splits_a_larger_cached_block_without_a_driver_allocation() -> None:
    memory.empty_cache()
    stream = rt.Stream()  # blocks of its own: no other test's cached block can be picked
    big = rt.empty([8 << 20], "uint8", "cuda", stream=stream)  # a 20 MiB segment
    base = big.data_ptr
    del big
    before = memory.stats()
    head = rt.empty([3 << 20], "uint8", "cuda", stream=stream)
    tail = rt.empty([5 << 20], "uint8", "cuda", stream=stream)
    after = memory.stats()
    assert after["driver_allocations"] == before["driver_allocations"]
    assert after["reserved"] == before["reserved"]
    assert head.data_ptr == base
    assert tail.data_ptr == base + (3 << 20)
    del head, tail
    stream.synchronize()
    memory.empty_cache()


def test_pool_coalesces_freed_neighbours_into_one_block() -> None:
    memory.empty_cache()
    stream = rt.Stream()
    quarter = 512 << 10
    parts = {i: rt.empty([quarter], "uint8", "cuda", stream=stream) for i in range(4)}
    base = parts[0].data_ptr
    assert [parts[i].data_ptr for i in range(4)] == [base + i * quarter for i in range(4)]
    start = memory.stats()
    cached_blocks = []
    for i in (1, 3, 0, 2):
        del parts[i]
        cached_blocks.append(memory.stats()["cached_blocks"] - start["cached_blocks"])
    assert cached_blocks == [1, 2, 2, 1]  # 0 merges with 1; 2 joins both sides
    assert memory.stats()["cached"] - start["cached"] == 4 * quarter
    whole = rt.empty([1 << 20], "uint8", "cuda", stream=stream)
    assert whole.data_ptr == base
    assert memory.stats()["driver_allocations"] == start["driver_allocations"]
    del whole
    reserved = memory.stats()["reserved"]
    memory.empty_cache()  # the segment is whole and free again: it goes back to the driver
    assert memory.stats()["reserved"] <= reserved - 4 * quarter


def _training_like_loop(alloc: Callable[[int], object], steps: int = 24) -> None:
    """Activations that grow and shrink with a batch size changing every step."""
    batches = [256, 512, 384, 128, 512, 256, 448, 320]
    for step in range(steps):
        b = batches[step % len(batches)]
        live: list[object] = []
        for _ in range(4):
            live += [alloc(b * 1024 * 4), alloc(b * 4096 * 4), alloc(b * 4096 * 4)]
        while live:
            live.pop()


def test_varying_size_loop_reserves_at_most_torch_plus_10_percent(torch) -> None:  # type: ignore[no-untyped-def]
    stream = rt.Stream()
    memory.empty_cache()
    memory.reset_peak_stats()
    base = memory.stats()
    _training_like_loop(lambda n: rt.empty([n], "uint8", "cuda", stream=stream))
    after = memory.stats()
    xrt_reserved = after["peak_reserved"] - base["reserved"]
    xrt_allocated = after["peak"] - base["allocated"]

    torch_stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch_base = torch.cuda.memory_reserved()
    with torch.cuda.stream(torch_stream):
        _training_like_loop(lambda n: torch.empty(n, dtype=torch.uint8, device="cuda"))
    torch_reserved = torch.cuda.max_memory_reserved() - torch_base

    assert xrt_allocated > 0
    assert torch_reserved > 0
    assert xrt_reserved <= 1.25 * xrt_allocated, (xrt_reserved, xrt_allocated)
    assert xrt_reserved <= 1.1 * torch_reserved, (xrt_reserved, torch_reserved)
    stream.synchronize()
    memory.empty_cache()


def test_oom_message_has_requested_and_free_bytes() -> None:
    with pytest.raises(rt.OutOfMemoryError, match="bytes are free") as info:
        rt.empty([1 << 50], "uint8", "cuda")
    assert info.value.requested_bytes == 1 << 50  # type: ignore[attr-defined]
    assert info.value.free_bytes > 0  # type: ignore[attr-defined]
    assert isinstance(info.value, MemoryError)


def test_dlpack_round_trip_with_torch_cuda(torch) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(64, 32, device="cuda")
    t = rt.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    assert t.device == "cuda:0"
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    assert y.device == x.device
    out = rt.empty([16], "bfloat16", "cuda")
    z = torch.from_dlpack(out)
    assert z.data_ptr() == out.data_ptr
    assert z.dtype == torch.bfloat16
    assert z.is_cuda
    # A transposed view comes in as a view: same memory, its strides kept.
    view = rt.from_dlpack(x.t())
    assert view.data_ptr == x.data_ptr()
    assert view.strides == x.t().stride()
    assert not view.is_contiguous


def test_dlpack_round_trip_with_cupy() -> None:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    x = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    t = rt.from_dlpack(x)
    assert t.data_ptr == x.data.ptr
    y = cupy.from_dlpack(t)
    assert y.data.ptr == x.data.ptr
    assert float(y.sum()) == 66.0


def test_streams_events_and_elapsed_time(torch) -> None:  # type: ignore[no-untyped-def]
    stream = rt.Stream()
    start, stop = rt.Event(), rt.Event()
    a = torch.randn(1024, 1024, device="cuda")
    start.record(stream)
    ops.matmul(a, a, stream=stream)
    stop.record(stream)
    stop.synchronize()
    assert stop.query()
    assert start.elapsed_ms(stop) > 0
    stream.synchronize()
    assert stream.query()


def test_graph_replay_gives_the_captured_result(torch) -> None:  # type: ignore[no-untyped-def]
    stream = rt.Stream()
    a = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, 256, device="cuda")
    ops.matmul(a, b, stream=stream)  # warm-up: tunes the algorithm outside the capture
    stream.synchronize()
    graph = rt.Graph()
    with graph.capture(stream):
        out = ops.matmul(a, b, stream=stream)
    a.copy_(torch.randn_like(a))
    torch.cuda.synchronize()
    graph.replay()
    stream.synchronize()
    torch.testing.assert_close(out, a @ b, rtol=1e-2, atol=1e-2)
    assert graph.replays == 1


@pytest.mark.parametrize("kernel", ["cublasLt", "cublas"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_blas_matmul_matches_torch(torch, kernel: str, dtype_name: str) -> None:  # type: ignore[no-untyped-def]
    dtype = getattr(torch, dtype_name)
    a = torch.randn(257, 129, device="cuda", dtype=dtype)
    b = torch.randn(129, 65, device="cuda", dtype=dtype)
    record = ExecutionRecord(kind="training")
    c = ops.matmul(a, b, policy=KernelPolicy(matmul=kernel), record=record)
    assert isinstance(c, torch.Tensor)
    assert c.dtype == dtype
    assert c.is_cuda
    tol = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}[dtype_name]
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=tol, atol=tol * 10)
    decision = record.decisions[0]
    assert decision.kernel == kernel
    assert decision.mode == "pin"
    if kernel == "cublasLt":
        assert "cuBLASLt algo_id=" in decision.reason  # the chosen algorithm is recorded
        (exported,) = rt.dispatcher.export_decisions()
        assert exported["algorithm"]["algo_id"] >= 0
        assert "heuristic rank" in exported["detail"]


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_xrt_layernorm_matches_torch(torch, dtype_name: str) -> None:  # type: ignore[no-untyped-def]
    dtype = getattr(torch, dtype_name)
    x = torch.randn(33, 1000, device="cuda", dtype=dtype) * 3 + 1
    w = torch.randn(1000, device="cuda", dtype=dtype)
    b = torch.randn(1000, device="cuda", dtype=dtype)
    y = ops.layernorm(x, w, b, 1e-5, policy=KernelPolicy(layernorm="xrt"))
    ref = torch.nn.functional.layer_norm(x.float(), (1000,), w.float(), b.float(), 1e-5)
    tol = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}[dtype_name]
    torch.testing.assert_close(y.float(), ref, rtol=tol, atol=tol * 10)


def test_auto_prefers_cublaslt_and_best_performance_times_both(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    assert ops.matmul(a, a) is not None
    assert ops.last_decision().kernel == "cublasLt"  # type: ignore[union-attr]
    d = rt.dispatcher.resolve(
        "matmul", [512, 512, 512], "float16", "cuda:0", KernelPolicy(strategy=BestPerformance)
    )
    assert d.kernel in ("cublasLt", "cublas")
    assert "fastest measured" in d.reason
    assert "cublasLt" in d.reason
    assert "cublas " in d.reason


def test_cpu_pin_on_cuda_tensor_is_unsupported(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(4, 4, device="cuda")
    with pytest.raises(rt.UnsupportedOperationError, match="runs on the CPU only"):
        ops.matmul(a, a, policy=KernelPolicy(matmul="cpu"))


def test_pluggable_allocator_serves_torch(torch) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    import textwrap

    # A fresh process: the allocator must be installed before torch's first CUDA allocation.
    code = textwrap.dedent(
        """
        import torch
        from xpuruntime.runtime import memory
        alloc = torch.cuda.memory.CUDAPluggableAllocator(
            memory.pluggable_allocator_path(), *memory.PLUGGABLE_ALLOCATOR_SYMBOLS)
        torch.cuda.memory.change_current_allocator(alloc)
        x = torch.ones(1 << 20, device="cuda")
        before = memory.stats()["allocated"]
        y = (x * 2).sum().item()
        assert y == 2 * (1 << 20), y
        assert memory.stats()["allocations"] > 0 and before >= 4 << 20, memory.stats()
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ok" in out.stdout


def test_fingerprint_names_gpu_driver_and_cublas() -> None:
    fp = rt.environment_fingerprint()
    assert fp["gpu"]
    assert fp["cc"][0].count(".") == 1
    assert fp["driver"]
    assert fp["cuda_runtime"]
    assert fp["cublaslt"] is not None, "cuBLASLt was not found by the loader"


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_xrt_norm_forward_and_backward_match_the_cpu_kernel(  # type: ignore[no-untyped-def]
    torch, norm: str, dtype_name: str
) -> None:
    dtype = getattr(torch, dtype_name)
    x, residual, dy, dsum = (torch.randn(65, 1000, device="cuda").to(dtype) for _ in range(4))
    w = (torch.randn(1000, device="cuda") * 0.3 + 1).to(dtype)
    forward = ops.layernorm_forward if norm == "layernorm" else ops.rmsnorm_forward
    policy = KernelPolicy(**{norm: "xrt"})
    got = forward(x, w, eps=1e-5, residual=residual, policy=policy)
    assert ops.last_decision().device == "cuda:0"  # type: ignore[union-attr]
    cpu = forward(x.cpu().float(), w.cpu().float(), eps=1e-5, residual=residual.cpu().float())
    tol = {"float32": 1e-4, "bfloat16": 3e-2}[dtype_name]
    torch.testing.assert_close(got.y.cpu().float(), cpu.y, rtol=tol, atol=tol * 4)
    torch.testing.assert_close(got.sum.float(), (x + residual).float())
    if norm == "layernorm":
        grads = ops.layernorm_backward(dy, got.sum, w, got.mean, got.rstd, dsum=dsum, policy=policy)
    else:
        grads = ops.rmsnorm_backward(dy, got.sum, w, got.rstd, dsum=dsum, policy=policy)
    assert grads.dx.dtype == dtype
    assert grads.dweight.shape == (1000,)
    reference = (
        torch.nn.functional.layer_norm if norm == "layernorm" else torch.nn.functional.rms_norm
    )
    s = got.sum.float().requires_grad_()
    wf = w.float().requires_grad_()
    y = reference(s, [1000], wf, eps=1e-5)
    dx, dw = torch.autograd.grad(y, (s, wf), dy.float())
    torch.testing.assert_close(grads.dx.float(), dx + dsum.float(), rtol=tol, atol=tol * 4)
    torch.testing.assert_close(grads.dweight.float(), dw, rtol=tol, atol=tol * 40)
