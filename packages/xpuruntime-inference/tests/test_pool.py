"""SessionPool: several real ONNX Runtime sessions, concurrent callers, one merged record.

CPU tests run everywhere; the ``gpu`` ones place sessions on every GPU of the machine
(any count) and check that each device index is honoured.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession, InputError, SessionPool
from xpuruntime.inference.demo import DEMO_MODEL, demo_images
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning

# One intra-op thread per session: the pool and the reference run the same kernels.
ONE_THREAD = ExecutionPolicy(num_threads=1, fallback="error")


def batches(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((1 + i % 5, 4)).astype(np.float32) for i in range(count)]


def test_concurrent_runs_give_the_single_session_outputs_and_one_record(mlp: Path) -> None:
    pool = SessionPool(
        mlp, devices=["cpu", "cpu", "cpu"], engine="onnxruntime", exec_policy=ONE_THREAD
    )
    single = InferenceSession(mlp, device="cpu", engine="onnxruntime", exec_policy=ONE_THREAD)
    inputs = batches(120)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def caller(start: int) -> None:
        try:
            for i in range(start, len(inputs), 8):
                results[i] = pool.run({"input": inputs[i]})["output"]
        except BaseException as error:  # surfaced below: a thread's failure must fail the test
            errors.append(error)

    threads = [threading.Thread(target=caller, args=(start,)) for start in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for i, x in enumerate(inputs):
        np.testing.assert_array_equal(results[i], single.run({"input": x})["output"])

    record = pool.record()
    assert [run.index for run in record.runs] == list(range(120))
    assert {run.device for run in record.runs} == {"cpu"}
    assert all(run.latency_ms > 0 for run in record.runs)
    assert all(len(r.runs) > 0 for r in pool.records()), "every session took runs"
    assert sum(len(r.runs) for r in pool.records()) == 120
    assert record.nodes == single.record().nodes  # identical decisions appear once
    assert record.device is not None
    assert record.device.chosen == "cpu, cpu, cpu"
    assert "session pool: 3 session(s) on cpu, cpu, cpu" in record.notes[-1]
    assert ExecutionRecord.from_json(record.to_json()) == record


def test_sequential_runs_take_the_sessions_in_turn(mlp: Path) -> None:
    pool = SessionPool(mlp, devices=["cpu", "cpu", "cpu"], exec_policy=ONE_THREAD)
    x = batches(1)[0]
    for _ in range(6):
        pool.run({"input": x})
    assert [len(r.runs) for r in pool.records()] == [2, 2, 2]


def test_map_keeps_the_feed_order(mlp: Path) -> None:
    pool = SessionPool(mlp, devices=["cpu", "cpu"], sessions_per_device=2, exec_policy=ONE_THREAD)
    assert len(pool) == 4
    single = InferenceSession(mlp, device="cpu", exec_policy=ONE_THREAD)
    inputs = batches(30)
    outputs = pool.map([{"input": x} for x in inputs])
    for x, out in zip(inputs, outputs, strict=True):
        np.testing.assert_array_equal(out["output"], single.run({"input": x})["output"])
    assert len(pool.record().runs) == 30


def test_a_bad_input_raises_and_leaves_the_pool_usable(mlp: Path) -> None:
    pool = SessionPool(mlp, devices=["cpu"], exec_policy=ONE_THREAD)
    with pytest.raises(InputError):
        pool.run({"input": np.zeros((2, 5), np.float32)})
    assert pool.run({"input": np.zeros((2, 4), np.float32)})["output"].shape == (2, 3)
    assert [run.index for run in pool.record().runs] == [0]


@pytest.mark.parametrize(
    ("devices", "kwargs", "message"),
    [
        ("cpu", {}, "write \\['cpu'\\]"),
        ([], {}, "devices is empty"),
        (["cpu"], {"sessions_per_device": 0}, "positive integer"),
        (
            ["cpu", "cpu"],
            {"exec_policy": ExecutionPolicy(device="cuda:0")},
            "leave the policy's device",
        ),
    ],
)
def test_bad_pool_arguments(
    mlp: Path, devices: object, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(PolicyError, match=message):
        SessionPool(mlp, devices=devices, **kwargs)  # type: ignore[arg-type]


@pytest.mark.usefixtures("without_cuda_ep")
def test_each_listed_gpu_goes_through_the_fallback_mode_without_cuda(mlp: Path) -> None:
    with pytest.raises(FallbackError, match="device cuda:0"):
        SessionPool(mlp, devices=["cuda:0", "cuda:1"], engine="onnxruntime", exec_policy=ONE_THREAD)
    with pytest.warns(FallbackWarning):
        pool = SessionPool(
            mlp,
            devices=["cuda:0", "cuda:1"],
            engine="onnxruntime",
            exec_policy=ExecutionPolicy(fallback="warn"),
        )
    assert pool.devices == ["cpu", "cpu"]
    assert [f.what for f in pool.record().fallbacks] == ["device cuda:0", "device cuda:1"]


# -- GPUs --------------------------------------------------------------------------------------


def _cuda_count() -> int:
    from xpuruntime.inference.device import cuda_device_count

    return cuda_device_count()


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_ep")
def test_a_session_on_every_gpu_index_runs_there() -> None:
    torch = pytest.importorskip("torch")
    images = demo_images(4)
    reference = InferenceSession(DEMO_MODEL, device="cpu").run({"image": images})["probabilities"]
    for index in range(_cuda_count()):
        device = f"cuda:{index}"
        sess = InferenceSession(
            DEMO_MODEL, device=device, exec_policy=ExecutionPolicy(fallback="error")
        )
        assert sess.device == device
        bound = sess.run({"image": torch.from_numpy(images).to(device)})["probabilities"]
        assert bound.__dlpack_device__() == (2, index)  # the output stays on that GPU
        np.testing.assert_allclose(
            torch.from_dlpack(bound).cpu().numpy(), reference, rtol=1e-4, atol=1e-6
        )


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_ep")
def test_a_pool_over_every_gpu_matches_the_cpu_and_routes_device_inputs() -> None:
    torch = pytest.importorskip("torch")
    count = _cuda_count()
    pool = SessionPool(DEMO_MODEL, exec_policy=ExecutionPolicy(fallback="error"))
    assert pool.devices == [f"cuda:{i}" for i in range(count)]
    images = demo_images(8)
    reference = InferenceSession(DEMO_MODEL, device="cpu").run({"image": images})["probabilities"]
    for out in pool.map([{"image": images}] * (4 * count)):
        np.testing.assert_allclose(out["probabilities"], reference, rtol=1e-4, atol=1e-6)
    last = f"cuda:{count - 1}"
    on_last = pool.run({"image": torch.from_numpy(images).to(last)})["probabilities"]
    assert on_last.__dlpack_device__() == (2, count - 1)
    record = pool.record()
    assert {run.device for run in record.runs} == set(pool.devices)
    assert record.runs[-1].device == last
    assert record.fallbacks == []


@pytest.mark.gpu
@pytest.mark.tensorrt
def test_tensorrt_builds_and_runs_on_the_last_gpu_and_keeps_the_callers_device() -> None:
    pytest.importorskip("tensorrt")
    torch = pytest.importorskip("torch")
    count = _cuda_count()
    if count < 2:
        pytest.skip(f"needs 2 GPUs to tell the device index apart, found {count}")
    torch.cuda.set_device(0)
    sess = InferenceSession(DEMO_MODEL, device=f"cuda:{count - 1}", engine="tensorrt")
    images = demo_images(4)
    reference = InferenceSession(DEMO_MODEL, device="cpu").run({"image": images})["probabilities"]
    np.testing.assert_allclose(
        sess.run({"image": images})["probabilities"], reference, rtol=1e-2, atol=1e-3
    )
    assert torch.cuda.current_device() == 0
