"""The TensorRT engine. TensorRT cannot be installed on the project's machines (its wheels
come from NVIDIA's index); these tests run where it is installed with a CUDA device."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.demo import DEMO_MODEL, demo_images
from xpuruntime.inference.engines.tensorrt import TensorRTEngine
from xpuruntime.policies import ExecutionPolicy, KernelPolicy

pytestmark = [
    pytest.mark.tensorrt,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorrt") is None,
        reason="tensorrt is not installed (its wheels come from NVIDIA's index, unreachable here)",
    ),
]


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not TensorRTEngine.availability().available:
        pytest.skip(TensorRTEngine.availability().reason)


def _reference() -> np.ndarray:
    import onnxruntime as ort

    raw = ort.InferenceSession(str(DEMO_MODEL), providers=["CPUExecutionProvider"])
    return raw.run(None, {"image": demo_images(4)})[0]


def test_seed_call_builds_and_runs(tmp_path: Path) -> None:
    policy = KernelPolicy(matmul="cublasLt")
    with pytest.warns(UserWarning, match="kernel for matmul"):
        sess = InferenceSession(
            model=str(DEMO_MODEL),
            device="cuda:0",
            engine="tensorrt",
            kernel_policy=policy,
            fp16=True,
        )
    out = sess.run({"image": demo_images(4)})["probabilities"]
    np.testing.assert_allclose(out, _reference(), atol=5e-3)
    record = sess.record()
    assert record.precision is not None
    assert record.precision.chosen == "fp16" or record.fallbacks
    assert record.nodes
    assert all(n.chosen == "tensorrt" for n in record.nodes)
    assert any(s.name == "optimization_profile" for s in record.settings)


def test_engine_cache_hit_and_explained_miss(tmp_path: Path) -> None:
    policy = ExecutionPolicy(cache_dir=str(tmp_path), fallback="error")
    first = InferenceSession(DEMO_MODEL, device="cuda:0", engine="tensorrt", exec_policy=policy)
    assert first.record().cache["tensorrt-engine"]["hit"] is False
    second = InferenceSession(DEMO_MODEL, device="cuda:0", engine="tensorrt", exec_policy=policy)
    assert second.record().cache["tensorrt-engine"]["hit"] is True
    third = InferenceSession(
        DEMO_MODEL,
        device="cuda:0",
        engine="tensorrt",
        exec_policy=policy.replace(graph_optimization="basic"),
    )
    assert "policy changed" in third.record().cache["tensorrt-engine"]["explanation"]
    assert (tmp_path / "tensorrt-timing").is_dir()
    np.testing.assert_allclose(
        second.run({"image": demo_images(4)})["probabilities"], _reference(), atol=1e-4
    )
