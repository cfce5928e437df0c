"""ONNX Runtime's CUDA execution provider: I/O binding without host copies, node placement,
the core's stream as compute stream. Needs onnxruntime-gpu and a GPU (the device machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import DeviceNotFoundError, HostShapeComputeError, InferenceSession
from xpuruntime.inference.demo import DEMO_MODEL, demo_images
from xpuruntime.policies import ExecutionPolicy, KernelPolicy

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]
needs_cuda_ep = pytest.mark.usefixtures("cuda_ep")
needs_cpu_only_ort = pytest.mark.usefixtures("without_cuda_ep")


@needs_cuda_ep
def test_device_resident_io_binding_makes_no_host_copies() -> None:
    torch = pytest.importorskip("torch")
    sess = InferenceSession(DEMO_MODEL, device="cuda:0", engine="onnxruntime")
    images = demo_images(4)
    x = torch.from_numpy(images).to("cuda:0")
    out = sess.run({"image": x})["probabilities"]
    assert out.__dlpack_device__()[0] == 2  # kDLCUDA: the output stays on the GPU
    probabilities = torch.from_dlpack(out).cpu().numpy()
    host = sess.run({"image": images})["probabilities"]
    np.testing.assert_allclose(probabilities, host, rtol=1e-4, atol=1e-6)
    bound, plain = sess.record().runs
    assert bound.io_binding
    assert bound.copies == []
    assert not plain.io_binding
    assert {c.direction for c in plain.copies} == {"host_to_device", "device_to_host"}


@needs_cuda_ep
def test_cuda_settings_and_placement() -> None:
    policy = ExecutionPolicy(precision="tf32", memory={"limit_bytes": 1 << 30}, fallback="warn")
    sess = InferenceSession(
        DEMO_MODEL, device="cuda:0", exec_policy=policy, kernel_policy=KernelPolicy(conv="cudnn")
    )
    settings = {s.name: s for s in sess.record().settings}
    assert settings["precision.tf32"].applied == "use_tf32=1"
    assert settings["memory.limit_bytes"].honoured
    assert settings["compute_stream"].honoured
    assert settings["kernel_policy.conv"].honoured
    conv = next(n for n in sess.record().nodes if n.op_type == "Conv")
    assert conv.chosen == "CUDAExecutionProvider"


@needs_cuda_ep
def test_strict_cuda_places_every_node_on_cuda() -> None:
    # Every op of the demo model has a CUDA kernel: under fallback="error" the session
    # builds, with every node on CUDA.
    sess = InferenceSession(
        DEMO_MODEL, device="cuda:0", exec_policy=ExecutionPolicy(fallback="error")
    )
    assert {n.chosen for n in sess.record().nodes} == {"CUDAExecutionProvider"}
    assert not sess.record().fallbacks


def _shape_subgraph_model(path: Path) -> Path:
    """x[batch, 4, 16] -> Relu -> Reshape(r, Concat(Unsqueeze(Gather(Shape(r), 0)), [-1]))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: object) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Shape", ["r"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
            helper.make_node("Unsqueeze", ["b", "axes"], ["bu"], name="unsqueeze"),
            helper.make_node("Concat", ["bu", "minus_one"], ["target"], name="concat", axis=0),
            helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
        ],
        "shape_subgraph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "flat"])],
        [const("zero", 0), const("axes", [0]), const("minus_one", [-1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@needs_cuda_ep
def test_strict_cuda_accepts_host_side_shape_computation(tmp_path: Path) -> None:
    # ONNX Runtime keeps Gather/Unsqueeze/Concat of the Shape output on the CPU by design;
    # raw ONNX Runtime runs this model, and so does fallback="error".
    import onnxruntime as ort

    # Optimizations off: ONNX Runtime's ReshapeFusion would otherwise fold this very pattern
    # into Reshape(r, [0, -1]) and leave no shape subgraph to place (seen with 1.31).
    strict = ExecutionPolicy(fallback="error", graph_optimization="disabled")
    model = _shape_subgraph_model(tmp_path / "shape.onnx")
    sess = InferenceSession(model, device="cuda:0", exec_policy=strict)
    x = np.random.default_rng(0).standard_normal((3, 4, 16)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    raw = ort.InferenceSession(str(model), options, providers=["CUDAExecutionProvider"])
    np.testing.assert_array_equal(sess.run({"x": x})["y"], raw.run(None, {"x": x})[0])
    record = sess.record()
    assert not record.fallbacks
    off = {n.name: n.placement for n in record.nodes if n.chosen != "CUDAExecutionProvider"}
    assert off, "ONNX Runtime placed every node on CUDA: the CPU-preferred case did not happen"
    assert set(off.values()) == {"host_shape"}, off
    with pytest.raises(HostShapeComputeError, match="'gather' \\(Gather\\)"):
        InferenceSession(
            model,
            device="cuda:0",
            exec_policy=strict.replace(host_shape_compute="forbid"),
        )


def test_absent_device_index() -> None:
    with pytest.raises(DeviceNotFoundError, match="does not exist"):
        InferenceSession(DEMO_MODEL, device="cuda:99")


@needs_cuda_ep
def test_model_path_object(tmp_path: Path) -> None:
    sess = InferenceSession(Path(DEMO_MODEL), device="cuda")
    assert sess.device.startswith("cuda")


@needs_cpu_only_ort
def test_cuda_tensors_into_a_cpu_fallback_session_are_counted() -> None:
    # A GPU, but onnxruntime without its CUDA provider: device="auto" picks the CPU, an
    # explicit "cuda:0" falls back to it (recorded), and CUDA inputs are fetched to the
    # host, which the record counts.
    torch = pytest.importorskip("torch")
    auto = InferenceSession(DEMO_MODEL)  # "auto": no engine here can use the GPU -> the CPU
    assert auto.device == "cpu"
    assert auto.record().device is not None
    assert "cannot use it" in auto.record().device.reason  # type: ignore[union-attr]
    assert not auto.record().fallbacks
    sess = InferenceSession(
        DEMO_MODEL, device="cuda:0", exec_policy=ExecutionPolicy(fallback="allow")
    )
    record = sess.record()
    assert record.device is not None
    assert record.device.chosen == "cpu"
    assert record.fallbacks[0].requested == "CUDAExecutionProvider"
    images = demo_images(4)
    out = sess.run({"image": torch.from_numpy(images).to("cuda:0")})["probabilities"]
    np.testing.assert_allclose(out, sess.run({"image": images})["probabilities"], rtol=1e-6)
    fetched, host = sess.record().runs
    assert [(c.direction, c.count, c.bytes) for c in fetched.copies] == [
        ("device_to_host", 1, images.nbytes)
    ]
    assert host.copies == []


@needs_cuda_ep
def test_a_cuda_ep_failure_during_a_run_moves_the_session_to_the_cpu_ep_on_record() -> None:
    # ONNX Runtime's own retry (a silent, printed switch to the CPU EP) is off; the kit's
    # (xpuruntime.inference.kit.ort_retry) goes through the fallback mode. No CUDA kernel
    # fails on purpose, so the failure is an EPFail of ONNX Runtime's own class handed to the
    # real session's handler; the session then runs device inputs on the CPU EP.
    import onnxruntime as ort

    torch = pytest.importorskip("torch")
    from xpuruntime.runtime.errors import FallbackError
    from xpuruntime.runtime.record import FallbackWarning

    ep_fail = ort.capi.onnxruntime_pybind11_state.EPFail
    images = demo_images(2)
    strict = InferenceSession(DEMO_MODEL, device="cuda:0", fallback="error")
    assert strict.engine_session.session._enable_fallback is False
    with pytest.raises(FallbackError, match="CUDAExecutionProvider failed while running"):
        strict.engine_session._leave_cuda(ep_fail("CUDA failure 700: an illegal memory access"))
    sess = InferenceSession(DEMO_MODEL, device="cuda:0", fallback="warn")
    want = sess.run({"image": images})["probabilities"]
    with pytest.warns(FallbackWarning, match="failed while running"):
        sess.engine_session._leave_cuda(ep_fail("CUDA failure 700: an illegal memory access"))
    (moved,) = [f for f in sess.record().fallbacks if f.what == "execution provider"]
    assert (moved.requested, moved.chosen) == ("CUDAExecutionProvider", "CPUExecutionProvider")
    assert sess.engine_session.session.get_providers() == ["CPUExecutionProvider"]
    got = sess.run({"image": torch.from_numpy(images).to("cuda:0")})["probabilities"]
    assert isinstance(got, np.ndarray)  # host I/O on the CPU EP
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not sess.record().runs[-1].io_binding
