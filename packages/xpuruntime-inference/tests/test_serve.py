"""Serving on Ray Serve. The Ray tests start a local Ray cluster (tens of seconds, ~1 GB):
they run in the non-default ``serve`` nox session and skip where Ray is not installed."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.errors import EngineRunError, InputNameError, InputShapeError
from xpuruntime.inference.serve import (
    ReplicaRefusedError,
    deployment,
    http_error,
    replica_devices,
    replica_records,
    run,
)
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.errors import FallbackError


@pytest.mark.parametrize(
    ("gpu_ids", "visible", "devices"),
    [
        ([], "", ["cpu"]),
        (["3"], "3", ["cuda:0"]),  # Ray's default: only the replica's GPU is visible
        (["5", "2"], "5,2", ["cuda:0", "cuda:1"]),
        (["2"], "0,1,2,3", ["cuda:2"]),
        (["1"], "", ["cuda:1"]),  # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: ids are indices
    ],
)
def test_ray_gpu_ids_become_device_indices(
    gpu_ids: list[str], visible: str, devices: list[str]
) -> None:
    assert replica_devices(gpu_ids, {"CUDA_VISIBLE_DEVICES": visible}) == devices


def test_a_hidden_assigned_gpu_is_refused() -> None:
    with pytest.raises(ReplicaRefusedError, match=r"GPU\(s\) \['4'\]"):
        replica_devices(["4"], {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_errors_answer_with_their_status_class_and_message(mlp: Path) -> None:
    """What a replica answers over HTTP for the typed errors a real session raises."""
    sess = InferenceSession(mlp, device="cpu")
    with pytest.raises(InputNameError) as bad_name:
        sess.run({"inptu": np.zeros((1, 4), np.float32)})
    with pytest.raises(InputShapeError) as bad_shape:
        sess.run({"input": np.zeros((1, 5), np.float32)})
    with pytest.raises(PolicyError) as bad_setting:
        ExecutionPolicy(device="gpu")
    for error in (bad_name.value, bad_shape.value, bad_setting.value):
        status, body = http_error(error)
        assert status == 400
        assert body == {"error": {"type": type(error).__name__, "message": str(error)}}
    assert "inptu" in http_error(bad_name.value)[1]["error"]["message"]
    assert http_error(FallbackError("device cuda: not here"))[0] == 409
    assert http_error(EngineRunError("the engine failed"))[0] == 500


# -- on a local Ray cluster ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="Ray Serve is not installed (nox -s serve)")
    serve = pytest.importorskip("ray.serve")
    # Logical CPUs: two replicas and the Serve proxy fit on a 2-core machine.
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=256 << 20)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield serve, port
    serve.shutdown()
    ray.shutdown()


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def test_replicas_answer_like_a_direct_session(ray_serve: Any, mlp: Path) -> None:
    serve, port = ray_serve
    policy = ExecutionPolicy(num_threads=1, fallback="error")
    handle = run(
        deployment(mlp, policy, num_replicas=2, gpus_per_replica=0),
        name="pool",
        route_prefix="/pool",
    )
    direct = InferenceSession(mlp, device="cpu", exec_policy=policy)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1 + i % 4, 4)).astype(np.float32) for i in range(12)]
    for x in inputs:
        served = handle.run.remote({"input": x}).result()
        np.testing.assert_array_equal(served["output"], direct.run({"input": x})["output"])
    over_http = post(f"http://127.0.0.1:{port}/pool", {"inputs": {"input": inputs[0].tolist()}})
    np.testing.assert_array_equal(
        np.asarray(over_http["outputs"]["output"], np.float32),
        direct.run({"input": inputs[0]})["output"],
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pool", timeout=60) as answer:
        one = json.loads(answer.read())
    assert one["devices"] == ["cpu"]
    assert one["record"]["kind"] == "inference"

    bad = urllib.request.Request(
        f"http://127.0.0.1:{port}/pool",
        data=json.dumps({"inputs": {"inptu": [[0.0] * 4]}}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=60)
    assert refused.value.code == 400
    error = json.loads(refused.value.read())["error"]
    assert error["type"] == "InputNameError"
    assert "inptu" in error["message"]

    records = replica_records(handle, 2)
    assert len(records) == 2
    assert over_http["replica"] in records
    assert sum(len(r.record.runs) for r in records.values()) == 13
    for replica in records.values():
        assert replica.devices == ["cpu"]
        assert replica.gpu_ids == []
        assert replica.record.fallbacks == []
        assert replica.record.policy["execution"]["num_threads"] == 1
        assert {run.device for run in replica.record.runs} <= {"cpu"}
    serve.delete("pool")


@pytest.mark.usefixtures("without_cuda_ep")
def test_a_replica_that_cannot_honour_the_policy_is_refused(ray_serve: Any, mlp: Path) -> None:
    serve, _ = ray_serve
    strict_gpu = ExecutionPolicy(device="cuda", fallback="error")
    with pytest.raises(ReplicaRefusedError, match=r"cannot honour the policy: device cuda:") as err:
        run(deployment(mlp, strict_gpu, gpus_per_replica=0), name="strict", route_prefix="/s")
    assert "fallback='error'" in str(err.value)
    serve.delete("strict")
    # Under fallback="warn" the same replica runs on the CPU and records why.
    lenient = strict_gpu.replace(fallback="warn")
    handle = run(deployment(mlp, lenient, gpus_per_replica=0), name="lenient", route_prefix="/l")
    (replica,) = replica_records(handle, 1).values()
    assert replica.devices == ["cpu"]
    assert [f.what for f in replica.record.fallbacks] == ["device cuda"]
    serve.delete("lenient")


def test_deployment_arguments_are_checked(ray_serve: Any, mlp: Path, tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="does not exist; record one first"):
        deployment(mlp, lock_file=tmp_path / "missing.lock.json")
    lock = tmp_path / "decisions.lock.json"
    lock.write_text("{}")
    other = ExecutionPolicy(lock="replay", lock_file=str(tmp_path / "other.json"))
    with pytest.raises(PolicyError, match="name different lockfiles"):
        deployment(mlp, other, lock_file=lock)
    with pytest.raises(PolicyError, match="gpus_per_replica must be >= 0"):
        deployment(mlp, gpus_per_replica=-1)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_ep")
def test_each_replica_runs_on_the_gpu_ray_assigned(ray_serve: Any) -> None:
    from xpuruntime.inference.demo import DEMO_MODEL, demo_images
    from xpuruntime.inference.device import cuda_device_count

    serve, _ = ray_serve
    gpus = cuda_device_count()
    policy = ExecutionPolicy(fallback="error")
    handle = run(
        deployment(DEMO_MODEL, policy, num_replicas=gpus, gpus_per_replica=1),
        name="gpus",
        route_prefix="/gpus",
    )
    images = demo_images(4)
    reference = InferenceSession(DEMO_MODEL, device="cpu").run({"image": images})
    served = handle.run.remote({"image": images}).result()
    np.testing.assert_allclose(
        served["probabilities"], reference["probabilities"], rtol=1e-4, atol=1e-6
    )
    records = replica_records(handle, gpus)
    assigned = sorted(gpu for replica in records.values() for gpu in replica.gpu_ids)
    assert assigned == sorted(str(i) for i in range(gpus))  # one GPU each, all used
    for replica in records.values():
        assert replica.devices == ["cuda:0"]  # Ray shows a replica only its own GPU
        assert replica.record.fallbacks == []
    serve.delete("gpus")
