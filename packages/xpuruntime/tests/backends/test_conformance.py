"""Backend conformance: the installed backend, reached through the `import xpuruntime as xrt`
facade exactly as a user installs it (`pip install xpuruntime[<extra>]`), runs the embedded
demo model, agrees with the ONNX Runtime CPU reference, and says in its record what ran.

`nox -s backends` sets XPURUNTIME_BACKEND; in any other environment these tests skip.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import xpuruntime as xrt

BACKEND = os.environ.get("XPURUNTIME_BACKEND", "")
pytestmark = pytest.mark.skipif(
    not BACKEND, reason="backend conformance runs in `nox -s backends` (XPURUNTIME_BACKEND unset)"
)

# backend -> (engine name, device, relative tolerance against the ORT CPU reference)
TARGETS = {
    "cpu": ("onnxruntime", "cpu", 1e-6),
    "torch-cpu": ("onnxruntime", "cpu", 1e-6),
    "openvino": ("openvino", "cpu", 1e-4),
    "qnn": ("qnn", "npu", 5e-2),  # HTP (emulated on x86) computes in reduced precision
    "cuda": ("onnxruntime", "cuda:0", 1e-3),
    "tensorrt": ("tensorrt", "cuda:0", 1e-2),
}


def _reference(images: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    from xpuruntime.inference.demo import DEMO_MODEL

    raw = ort.InferenceSession(str(DEMO_MODEL), providers=["CPUExecutionProvider"])
    names = [o.name for o in raw.get_outputs()]
    return dict(zip(names, raw.run(names, {raw.get_inputs()[0].name: images}), strict=True))


def test_demo_model_agrees_with_the_reference() -> None:
    from xpuruntime.inference.demo import DEMO_MODEL, demo_images

    engine, device, rtol = TARGETS[BACKEND]
    images = demo_images(4)
    if BACKEND == "qnn":  # the HTP runs fixed shapes only; no NPU here, so the simulator
        policy = xrt.ExecutionPolicy(
            fallback="allow", static_shape=True, input_shapes={"image": list(images.shape)}
        )
    else:
        policy = xrt.ExecutionPolicy(fallback="error")
    sess = xrt.InferenceSession(str(DEMO_MODEL), device=device, engine=engine, exec_policy=policy)
    outputs = sess.run({sess.inputs[0].name: images})
    expected = _reference(images)
    assert set(outputs) == set(expected)
    for name, want in expected.items():
        got = np.asarray(outputs[name])
        scale = float(np.abs(want).max()) or 1.0
        assert np.abs(got - want).max() <= rtol * scale, (name, got, want)

    record = sess.record()
    assert record.kind == "inference"
    assert record.engine is not None
    assert record.engine.chosen == engine
    assert len(record.runs) == 1
    assert xrt.ExecutionRecord.from_json(record.to_json()) == record
    assert engine in sess.explain()


def test_the_backend_is_listed_as_available() -> None:
    from xpuruntime.runtime.engines import load_engine

    engine, _, _ = TARGETS[BACKEND]
    availability = load_engine(engine).availability()
    assert availability.available, availability.reason


@pytest.mark.skipif(BACKEND != "torch-cpu", reason="needs PyTorch (backends-torch-cpu)")
def test_torch_tensors_feed_a_session_zero_copy() -> None:
    import torch

    from xpuruntime.inference.demo import DEMO_MODEL, demo_images

    sess = xrt.InferenceSession(str(DEMO_MODEL), device="cpu", engine="onnxruntime")
    images = demo_images(2)
    out_torch = sess.run({sess.inputs[0].name: torch.from_numpy(images)})
    out_numpy = sess.run({sess.inputs[0].name: images})
    for name, value in out_numpy.items():
        np.testing.assert_array_equal(np.asarray(out_torch[name]), value)


@pytest.mark.skipif(BACKEND != "torch-cpu", reason="needs PyTorch (backends-torch-cpu)")
def test_training_and_inference_share_one_policy_and_record_schema() -> None:
    import torch

    import xpuruntime.pytorch as xrt_torch

    policy = xrt.KernelPolicy(attention="math")
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(8, 16), torch.randn(8, 4)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        optimizer.step()

    with xrt_torch.kernel_policy(policy):
        assert xrt_torch.get_kernel_policy() == policy
        record = xrt_torch.explain(step)
    assert record.kind == "training"
    assert record.schema_version == xrt.ExecutionRecord(kind="inference").schema_version
    assert record.runs, "explain() recorded no step"
    assert xrt.ExecutionRecord.from_json(record.to_json()) == record
