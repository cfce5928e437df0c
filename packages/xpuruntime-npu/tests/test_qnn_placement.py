"""Placement classification on a real non-CPU provider: the QNN EP (HTP simulator on x86_64).

What the QNN EP leaves to ONNX Runtime's CPU EP is read from raw ONNX Runtime with the same
provider options, and xpuruntime must list exactly those nodes, classify them (host-side shape
computation or fallback), apply the policy to each kind, and compute the same outputs.
Observed with onnxruntime 1.31 / onnxruntime-qnn 2.7: with graph optimizations on, static
shapes fold every shape subgraph into constants (nothing is left on the CPU); with them off,
``Shape`` stays on the CPU (host-side shape computation), Gather/Unsqueeze/Concat of its output
run on QNN, and a ``Reshape`` whose shape is computed at run time falls back to the CPU. QNN
has no ``Mod``. QNN takes ``If``.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "onnxruntime_qnn", reason="onnxruntime-qnn is not installed: pip install 'xpuruntime-npu[qnn]'"
)
onnx = pytest.importorskip("onnx", reason="onnx builds the test models: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xpuruntime.inference import InferenceSession  # noqa: E402
from xpuruntime.inference.errors import HostShapeComputeError  # noqa: E402
from xpuruntime.policies import ExecutionPolicy  # noqa: E402
from xpuruntime.runtime.errors import FallbackError  # noqa: E402

QNN_EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"


def _save(nodes, name, inputs, outputs, inits, path: Path) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _weight(shape=(16, 16)):
    rng = np.random.default_rng(7)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.25).astype(np.float32), "w")


def _int64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


@pytest.fixture
def shape_subgraph(tmp_path: Path) -> Path:
    """x[batch,4,16] -> MatMul -> Relu -> Reshape(r, Concat(Unsqueeze(Gather(Shape(r), 0)), [-1]))."""
    return _save(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Relu", ["m"], ["r"], name="relu"),
            helper.make_node("Shape", ["r"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
            helper.make_node("Unsqueeze", ["b", "axes"], ["bu"], name="unsqueeze"),
            helper.make_node("Concat", ["bu", "minus_one"], ["target"], name="concat", axis=0),
            helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
        ],
        "shape_subgraph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "flat"])],
        [_weight(), _int64("zero", 0), _int64("axes", [0]), _int64("minus_one", [-1])],
        tmp_path / "shape_subgraph.onnx",
    )


@pytest.fixture
def mod_model(tmp_path: Path) -> Path:
    """x[4,16] -> MatMul -> Mod (QNN has no Mod) -> Relu."""
    divisor = numpy_helper.from_array(np.array([1.5], np.float32), "d")
    return _save(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Mod", ["m", "d"], ["md"], name="mod", fmod=1),
            helper.make_node("Relu", ["md"], ["y"], name="relu"),
        ],
        "mod",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [_weight(), divisor],
        tmp_path / "mod.onnx",
    )


@pytest.fixture
def if_model(tmp_path: Path) -> Path:
    """If(Shape(x)[0] > 2) then Relu(x@w) else Neg(x@w): control flow on a shape value."""
    then = helper.make_graph(
        [helper.make_node("Relu", ["m"], ["t"], name="then_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["a", "b"])],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Neg", ["m"], ["e"], name="else_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["a", "b"])],
    )
    return _save(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
            helper.make_node("Greater", ["n", "two"], ["c"], name="greater"),
            helper.make_node(
                "If", ["c"], ["y"], name="if", then_branch=then, else_branch=otherwise
            ),
        ],
        "if_shape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [_weight(), _int64("zero", 0), _int64("two", 2)],
        tmp_path / "if_shape.onnx",
    )


def _raw_qnn(model: Path, dims: dict[str, int], optimization: str, options: dict[str, str]):
    """Raw ONNX Runtime with the QNN EP: the session and its off-QNN nodes."""
    import onnxruntime as ort

    from xpuruntime.npu import qnn_backend

    device = next(d for d in qnn_backend.devices() if d.name == "cpu")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, optimization)
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for name, value in dims.items():
        so.add_free_dimension_override_by_name(name, value)
    so.add_provider_for_devices(
        [device.ep_device], {"backend_path": qnn_backend.backend_library("htp"), **options}
    )
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = ort.InferenceSession(str(model), sess_options=so)
    elsewhere = {
        node.name
        for sub in session.get_provider_graph_assignment_info()
        if sub.ep_name != QNN_EP
        for node in sub.get_nodes()
    }
    return session, elsewhere


# The HTP options xpuruntime's QNN engine sets for these policies (its default performance
# hint 'latency' is burst mode; fp16 needs the SoC named).
FP32_OPTIONS = {"htp_performance_mode": "burst", "enable_htp_fp16_precision": "0"}
FP16_OPTIONS = {
    "htp_performance_mode": "burst",
    "enable_htp_fp16_precision": "1",
    "soc_model": "69",
}
FP16_POLICY = {"precision": "fp16", "engine_options": {"qnn": {"soc_model": "69"}}}


def _xrt(model: Path, shapes: dict[str, list[int]], **policy) -> InferenceSession:
    return InferenceSession(
        model,
        engine="qnn",
        device="cpu",
        exec_policy=ExecutionPolicy(static_shape=True, input_shapes=shapes, **policy),
    )


def _feeds(shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def _assert_same_outputs(session: InferenceSession, raw, feeds) -> None:
    names = [o.name for o in raw.get_outputs()]
    want = dict(zip(names, raw.run(names, feeds), strict=True))
    got = session.run(feeds)
    for name in names:
        np.testing.assert_array_equal(got[name], want[name])


def test_shape_nodes_on_the_host_are_recorded_not_fallbacks(shape_subgraph):
    shapes = {"x": [2, 4, 16]}
    raw, elsewhere = _raw_qnn(shape_subgraph, {"batch": 2}, "ORT_DISABLE_ALL", FP32_OPTIONS)
    session = _xrt(shape_subgraph, shapes, graph_optimization="disabled", fallback="allow")
    record = session.record()
    off = {n.name: n for n in record.nodes if n.chosen != QNN_EP}
    assert set(off) == elsewhere  # exactly what ONNX Runtime reports
    assert off["shape"].placement == "host_shape"
    assert "reads only its input's shape" in off["shape"].reason
    assert off["reshape"].placement == "fallback"
    assert "'r' is a device tensor from 'relu'" in off["reshape"].reason
    (fallback,) = record.fallbacks
    assert "'reshape'" in fallback.what
    assert "'shape'" not in fallback.what
    assert any("host-side shape computation" in note for note in record.notes)
    _assert_same_outputs(session, raw, _feeds(shapes))


def test_error_mode_names_only_the_fallback(shape_subgraph):
    with pytest.raises(FallbackError, match=r"'reshape' \(Reshape\)") as info:
        _xrt(shape_subgraph, {"x": [2, 4, 16]}, graph_optimization="disabled", fallback="error")
    assert "'shape' (Shape)" not in str(info.value)


def test_forbidding_host_shape_work_names_the_shape_nodes(shape_subgraph):
    with pytest.raises(HostShapeComputeError, match=r"'shape' \(Shape\)"):
        _xrt(
            shape_subgraph,
            {"x": [2, 4, 16]},
            graph_optimization="disabled",
            fallback="allow",
            host_shape_compute="forbid",
        )


def test_static_shapes_fold_the_shape_subgraph(shape_subgraph):
    shapes = {"x": [2, 4, 16]}
    raw, elsewhere = _raw_qnn(shape_subgraph, {"batch": 2}, "ORT_ENABLE_ALL", FP32_OPTIONS)
    assert elsewhere == set()
    session = _xrt(shape_subgraph, shapes, fallback="error", host_shape_compute="forbid")
    record = session.record()
    assert record.fallbacks == []
    assert {n.placement for n in record.nodes} == {"requested"}
    _assert_same_outputs(session, raw, _feeds(shapes))


def test_an_op_qnn_lacks_is_a_fallback(mod_model):
    raw, elsewhere = _raw_qnn(mod_model, {}, "ORT_ENABLE_ALL", FP32_OPTIONS)
    assert elsewhere == {"mod"}
    with pytest.raises(FallbackError, match=r"'mod' \(Mod\)"):
        _xrt(mod_model, {"x": [4, 16]}, fallback="error")
    session = _xrt(mod_model, {"x": [4, 16]}, fallback="allow")
    (mod,) = [n for n in session.record().nodes if n.name == "mod"]
    assert (mod.chosen, mod.placement) == (CPU_EP, "fallback")
    assert "computes on tensor data" in mod.reason
    _assert_same_outputs(session, raw, _feeds({"x": [4, 16]}))


@pytest.mark.parametrize("optimization", ["ORT_ENABLE_ALL", "ORT_DISABLE_ALL"])
def test_control_flow_on_a_shape_value(if_model, optimization):
    # fp16: the HTP simulator cannot finalize this graph's int64 compare in fp32 (EP_FAIL).
    shapes = {"x": [3, 16]}
    raw, elsewhere = _raw_qnn(if_model, {"batch": 3}, optimization, FP16_OPTIONS)
    policy_level = {"ORT_ENABLE_ALL": "all", "ORT_DISABLE_ALL": "disabled"}[optimization]
    session = _xrt(
        if_model, shapes, graph_optimization=policy_level, fallback="error", **FP16_POLICY
    )
    record = session.record()
    off = {n.name: n.placement for n in record.nodes if n.chosen != QNN_EP}
    assert set(off) == elsewhere
    # Folded (optimizations on: the If is inlined under a generated name) or not, whatever
    # stays on the CPU is the shape read; nothing falls back.
    assert set(off.values()) <= {"host_shape"}
    assert record.fallbacks == []
    _assert_same_outputs(session, raw, _feeds(shapes))
