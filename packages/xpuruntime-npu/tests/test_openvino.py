"""Real OpenVINO sessions on the CPU device, against ONNX Runtime's CPU outputs.

Tolerance: fp32 on OpenVINO CPU agrees with ONNX Runtime CPU to 1e-5 of the output scale
(different kernels, same precision); int8 (NNCF) to 5% of the output scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "openvino", reason="openvino is not installed: pip install 'xpuruntime-npu[openvino]'"
)

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.npu.engines.openvino import OpenVINOEngine
from xpuruntime.npu.errors import QuantizedModelRequiredError, StaticShapeRequiredError
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning

FP32_REL = 1e-5


def _session(model, record, device="cpu", **policy):
    from xpuruntime.policies import ExecutionPolicy

    return OpenVINOEngine().create_session(
        Path(model),
        device=device,
        exec_policy=ExecutionPolicy(**policy),
        kernel_policy=None,
        record=record,
    )


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_cpu_agrees_with_onnxruntime(request, model_name, record, feeds_for, ort_reference, close):
    model = request.getfixturevalue(model_name)
    feeds = feeds_for(model)
    session = _session(model, record)
    close(session.run(feeds), ort_reference(model, feeds), rel=FP32_REL)
    assert record.device.chosen == "CPU"
    assert record.precision.chosen == "fp32"
    assert record.fallbacks == []
    assert record.nodes
    assert all(n.chosen == "CPU" for n in record.nodes)
    assert any(
        n.kernel and n.kernel.startswith(("jit", "brgemm", "gemm", "ref")) for n in record.nodes
    )


def test_dynamic_batch_runs_several_batches_on_cpu(
    dynamic_mlp, record, feeds_for, ort_reference, close
):
    session = _session(dynamic_mlp, record)
    assert session.inputs[0].shape == (None, 16)
    for batch in (1, 3, 8):
        feeds = feeds_for(dynamic_mlp, batch=batch)
        close(session.run(feeds), ort_reference(dynamic_mlp, feeds), rel=FP32_REL)


def test_static_shape_reshapes_to_input_shapes(
    dynamic_mlp, record, feeds_for, ort_reference, close
):
    session = _session(dynamic_mlp, record, static_shape=True, input_shapes={"x": [2, 16]})
    assert session.inputs[0].shape == (2, 16)
    assert session.outputs[0].shape == (2, 8)
    feeds = feeds_for(dynamic_mlp, batch=2)
    close(session.run(feeds), ort_reference(dynamic_mlp, feeds), rel=FP32_REL)
    assert any(s.name == "input_shapes" and s.applied == {"x": [2, 16]} for s in record.settings)


def test_static_shape_without_shapes_is_a_clear_error(dynamic_mlp, record):
    with pytest.raises(StaticShapeRequiredError, match=r"input_shapes=\{'x': \[1, 16\]\}"):
        _session(dynamic_mlp, record, static_shape=True)


def test_input_shapes_for_unknown_input_is_a_policy_error(dynamic_mlp, record):
    with pytest.raises(PolicyError, match=r"names input 'xx', but the model's inputs are \['x'\]"):
        _session(dynamic_mlp, record, static_shape=True, input_shapes={"xx": [2, 16]})


def test_settings_are_read_back(mlp, record):
    _session(
        mlp,
        record,
        performance_hint="throughput",
        num_threads=1,
        engine_options={"openvino": {"num_streams": 1}},
    )
    settings = {s.name: s for s in record.settings}
    assert settings["performance_hint"].applied == "THROUGHPUT"
    assert settings["performance_hint"].honoured
    assert settings["num_threads"].applied == 1
    assert settings["num_threads"].honoured
    assert settings["engine_options.openvino.num_streams"].honoured


def test_unknown_engine_option_is_a_policy_error(mlp, record):
    with pytest.raises(PolicyError, match="Did you mean 'num_streams'"):
        _session(mlp, record, engine_options={"openvino": {"num_stream": 2}})
    with pytest.raises(PolicyError, match="upper case"):
        _session(mlp, record, engine_options={"openvino": {"cache_mode": "x"}})


CAPABILITY = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16"}


def _cpu_capabilities() -> list[str]:
    import openvino as ov

    return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def _compiled_hint(session) -> str:
    hint = session._compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
    return {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}[hint]


@pytest.mark.parametrize("forced", [None, "absent", "present"])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_precision_follows_the_cpu_capabilities(
    mlp, record, feeds_for, ort_reference, close, monkeypatch, precision, forced
):
    """On any x86 CPU: a precision the plugin lists runs as asked (the hint is set and read
    back); another one is a precision fallback to the model's stored fp32 (the one rule of
    every engine). The capability report forced "absent" runs the fallback branch on a CPU
    that has the precision; forced "present" on one that lacks it, the plugin then compiles
    for what it can, and the record says what the compiled model reports."""
    from xpuruntime.npu import openvino_backend

    caps = _cpu_capabilities()
    capability = CAPABILITY.get(precision)
    if forced is not None and capability is not None:
        real = openvino_backend.capabilities
        caps = [c for c in caps if c != capability] + ([capability] * (forced == "present"))
        monkeypatch.setattr(
            openvino_backend,
            "capabilities",
            lambda device: (
                *(c for c in real(device) if c != capability),
                *([capability] * (forced == "present")),
            ),
        )
    if capability in caps:
        session = _session(mlp, record, precision=precision, fallback="allow")
        ran = _compiled_hint(session)
        assert record.precision.chosen == ran
        precision_fallbacks = [f for f in record.fallbacks if f.what == "precision"]
        if ran == precision:
            assert precision_fallbacks == []
        else:  # the plugin took the hint and compiled for another precision: said so
            assert [(f.requested, f.chosen) for f in precision_fallbacks] == [(precision, ran)]
            assert "compiled for" in precision_fallbacks[0].reason
        return
    with pytest.raises(FallbackError, match=f"cannot apply {precision}"):
        _session(mlp, ExecutionRecord(kind="inference"), precision=precision, fallback="error")
    with pytest.warns(FallbackWarning, match="precision"):
        session = _session(mlp, record, precision=precision, fallback="warn")
    assert record.precision.requested == precision
    assert record.precision.chosen == "fp32" == _compiled_hint(session)
    (fallback,) = record.fallbacks
    assert (fallback.what, fallback.chosen, fallback.mode) == ("precision", "fp32", "warn")
    feeds = feeds_for(mlp)
    close(session.run(feeds), ort_reference(mlp, feeds), rel=FP32_REL)


@pytest.mark.usefixtures("npu_absent")
class TestNpuAbsent:
    """This machine has no Intel NPU: device='npu' under each fallback mode."""

    def test_error_raises_naming_the_devices_found(self, mlp, record):
        with pytest.raises(FallbackError, match=r"no NPU device here; its devices: \['CPU'\]"):
            _session(mlp, record, device="npu", fallback="error")

    def test_warn_runs_on_cpu_and_records(self, mlp, record, feeds_for, ort_reference, close):
        with pytest.warns(FallbackWarning, match="NPU"):
            session = _session(mlp, record, device="npu", fallback="warn")
        assert [(f.requested, f.chosen, f.mode) for f in record.fallbacks] == [
            ("NPU", "CPU", "warn")
        ]
        assert record.device.chosen == "CPU"
        feeds = feeds_for(mlp)
        close(session.run(feeds), ort_reference(mlp, feeds), rel=FP32_REL)

    def test_allow_records_without_warning(self, mlp, record):
        _session(mlp, record, device="npu:0", fallback="allow")
        assert [(f.requested, f.mode) for f in record.fallbacks] == [("NPU.0", "allow")]

    def test_auto_priority_list_lands_elsewhere(self, mlp, record):
        with pytest.raises(FallbackError, match="NPU"):
            _session(mlp, record, device="AUTO:NPU,CPU", fallback="error")
        allowed = ExecutionRecord(kind="inference")
        session = _session(mlp, allowed, device="AUTO:NPU,CPU", fallback="allow")
        assert session.execution_devices == ["CPU"]
        assert allowed.device.chosen == "CPU"
        assert allowed.fallbacks[0].chosen == "CPU"

    def test_dynamic_model_on_npu_needs_static_shapes(self, dynamic_mlp, record):
        # Checked against the device asked for: the model would fail on a machine with the NPU.
        with pytest.raises(StaticShapeRequiredError, match="runs fixed shapes only"):
            _session(dynamic_mlp, record, device="AUTO:CPU,NPU", fallback="allow")


def test_auto_on_the_required_device_is_no_fallback(mlp, record):
    session = _session(mlp, record, device="AUTO:CPU", fallback="error")
    assert session.execution_devices == ["CPU"]
    assert record.fallbacks == []


def test_cuda_device_falls_back_through_the_policy(mlp, record):
    with pytest.raises(FallbackError, match="cuda:0"):
        _session(mlp, record, device="cuda:0", fallback="error")


@pytest.mark.parametrize(("name", "hint"), [("tpu", "'CPU'"), ("cpux", "Did you mean 'cpu'")])
def test_unknown_device_lists_what_exists(mlp, record, name, hint):
    with pytest.raises(DeviceNotFoundError, match=hint):
        _session(mlp, record, device=name)


def test_cache_hits_on_the_second_session(mlp, tmp_path, feeds_for):
    first, second = ExecutionRecord(kind="inference"), ExecutionRecord(kind="inference")
    cache_dir = str(tmp_path / "cache")
    a = _session(mlp, first, cache_dir=cache_dir)
    b = _session(mlp, second, cache_dir=cache_dir)
    assert first.cache["openvino"]["hit"] is False
    assert first.cache["openvino"]["stored"] is True
    assert second.cache["openvino"]["hit"] is True
    feeds = feeds_for(mlp)
    np.testing.assert_array_equal(a.run(feeds)["y"], b.run(feeds)["y"])
    third = ExecutionRecord(kind="inference")
    _session(mlp, third, cache_dir=cache_dir, performance_hint="throughput")
    assert "performance_hint changed" in third.cache["openvino"]["explanation"]


def test_int8_without_a_quantized_model_says_how_to_make_one(mlp, record):
    with pytest.raises(QuantizedModelRequiredError, match="quantize_for_openvino"):
        _session(mlp, record, precision="int8")


def test_int8_with_an_nncf_model(cnn, tmp_path, record, feeds_for, ort_reference, close):
    pytest.importorskip("nncf", reason="nncf is not installed: pip install 'xpuruntime-npu[nncf]'")
    from xpuruntime.npu.quantize import quantize_for_openvino

    calibration = [feeds_for(cnn, seed=s) for s in range(32)]
    quantized = quantize_for_openvino(cnn, calibration, tmp_path / "cnn.int8.xml")
    session = _session(
        cnn, record, precision="int8", quantized_model=str(quantized), fallback="allow"
    )
    feeds = feeds_for(cnn, seed=99)
    close(session.run(feeds), ort_reference(cnn, feeds), rel=0.05)
    # What the plugin runs depends on the CPU: the record follows its runtime graph.
    integer = _runs_integer_ops(quantized)
    assert (record.precision.chosen == "int8") == integer
    assert any(n.precision in ("i8", "u8") for n in record.nodes) == integer


#: Runtime-graph layers that hold data: a Const in i8 is a weight stored in i8, which an
#: f32 kernel may dequantize; only executing layers say what an op runs in (as the engine).
_DATA_LAYERS = ("Input", "Output", "Const")


def _runs_integer_ops(quantized: Path) -> bool:
    """Whether raw OpenVINO's CPU plugin runs any op of ``quantized`` in i8/u8 here: AVX2
    CPUs do for this MLP; AVX-512 ones fold its FakeQuantize ops into an f32 subgraph that
    reads the i8 weight constants."""
    import openvino as ov

    runtime = ov.Core().compile_model(str(quantized), "CPU").get_runtime_model()
    found = [op.get_rt_info() for op in runtime.get_ordered_ops()]
    return any(
        str(info["runtimePrecision"].astype(str)) in ("i8", "u8")
        for info in found
        if "runtimePrecision" in info
        and ("layerType" not in info or str(info["layerType"].astype(str)) not in _DATA_LAYERS)
    )


@pytest.mark.parametrize("forced", [None, "f32", "i8"])
def test_int8_record_follows_the_runtime_graph(
    mlp, tmp_path, record, feeds_for, monkeypatch, forced
):
    # int8 holds only where the runtime graph runs an op in i8/u8; where the plugin emulates
    # the quantized model in float, the record must not claim int8. Which one happens
    # depends on the CPU: the expectation comes from raw OpenVINO, and the plugin's report
    # forced each way ("f32": every op, "i8": every op) runs the other branch on any CPU.
    pytest.importorskip("nncf", reason="nncf is not installed: pip install 'xpuruntime-npu[nncf]'")
    from xpuruntime.npu.engines import openvino_placement as engine
    from xpuruntime.npu.quantize import quantize_for_openvino

    calibration = [feeds_for(mlp, seed=s) for s in range(32)]
    quantized = quantize_for_openvino(mlp, calibration, tmp_path / "mlp.int8.xml")
    integer = _runs_integer_ops(quantized) if forced is None else forced == "i8"
    if forced is not None:
        monkeypatch.setattr(engine, "runtime_precision", lambda rt_info: forced)
    policy = {"precision": "int8", "quantized_model": str(quantized), "fallback": "error"}
    if integer:
        _session(mlp, record, **policy)
        assert record.precision.chosen == "int8"
        assert "run in i8/u8" in record.precision.reason
        assert record.fallbacks == []
        return
    with pytest.raises(FallbackError, match="no op runs in i8/u8"):
        _session(mlp, record, **policy)


def test_concurrent_runs_do_not_mix_buffers(mlp, record, feeds_for, ort_reference, close):
    from concurrent.futures import ThreadPoolExecutor

    session = _session(mlp, record)
    feeds = [feeds_for(mlp, seed=s) for s in range(32)]
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(session.run, feeds))
    for got, given in zip(outputs, feeds, strict=True):
        close(got, ort_reference(mlp, given), rel=FP32_REL)


def _save_graph(graph, path: Path, opsets=(("", 17),)) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_string_tensors_are_refused_naming_them(tmp_path, record):
    # Raw OpenVINO 2026.4 compiles this model and aborts the process when it runs.
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["same"])],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, [2])],
    )
    model = _save_graph(graph, tmp_path / "strings.onnx")
    with pytest.raises(UnsupportedOperationError, match=r"\['text', 'same'\] are string tensors"):
        _session(model, record)


def test_an_operation_without_conversion_is_named(tmp_path, record):
    from onnx import TensorProto, helper

    tree = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
        target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0],
    )  # fmt: skip
    graph = helper.make_graph(
        [tree],
        "trees",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1])],
    )
    model = _save_graph(graph, tmp_path / "trees.onnx", (("", 17), ("ai.onnx.ml", 3)))
    with pytest.raises(UnsupportedOperationError, match=r"TreeEnsembleRegressor.*onnxruntime"):
        _session(model, record)


def test_a_failed_run_leaves_every_shape_usable(cnn, tmp_path, record, ort_reference, close):
    # Batch 0 fails inside the CPU plugin's MaxPool; the runs before and after must not care.
    import onnx

    model = onnx.load(str(cnn))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    dynamic = tmp_path / "cnn_dynamic.onnx"
    onnx.save(model, str(dynamic))
    session = _session(dynamic, record)
    rng = np.random.default_rng(5)
    feeds = {b: {"x": rng.standard_normal((b, 3, 16, 16)).astype(np.float32)} for b in (1, 2, 3)}
    close(session.run(feeds[2]), ort_reference(dynamic, feeds[2]), rel=FP32_REL)
    with pytest.raises(RuntimeError):
        session.run({"x": np.zeros((0, 3, 16, 16), np.float32)})
    for batch in (1, 2, 3):
        close(session.run(feeds[batch]), ort_reference(dynamic, feeds[batch]), rel=FP32_REL)


def test_settings_openvino_has_no_switch_for_are_recorded_not_honoured(mlp, record):
    _session(mlp, record, graph_optimization="basic", memory={"limit_bytes": 1 << 30})
    settings = {s.name: s for s in record.settings}
    for name in ("graph_optimization", "memory.pool", "memory.limit_bytes"):
        assert not settings[name].honoured, name
        assert settings[name].note, name
    honoured = ExecutionRecord(kind="inference")
    _session(mlp, honoured)
    assert next(s for s in honoured.settings if s.name == "graph_optimization").honoured


def _matmul_relu(path: Path, dtype: str) -> Path:
    """x[4,16] -> MatMul -> Relu -> y[4,8], weights and tensors stored in ``dtype`` (no Add:
    the CPU plugin's fused subgraphs refuse float64 inputs)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "matmul_relu",
        [helper.make_tensor_value_info("x", elem, [4, 16])],
        [helper.make_tensor_value_info("y", elem, [4, 8])],
        [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(dtype), "w")],
    )
    return _save_graph(graph, path)


@pytest.mark.parametrize("forced", [None, "absent", "present"])
@pytest.mark.parametrize(("dtype", "stored"), [("float16", "fp16"), ("float64", "fp64")])
def test_a_float_model_runs_in_f32_where_the_cpu_lacks_its_precision(
    tmp_path, record, monkeypatch, dtype, stored, forced
):
    """Precision not set: a float16 model runs in fp16 where the CPU lists FP16. Elsewhere,
    and for float64 (no OpenVINO device computes in it), the engine sets f32, the closest
    there is, rather than leave the plugin's CPU-dependent default (bf16 on CPUs with
    AVX512_BF16 or AMX), and the record says fp32 with the precision fallback. FP16 forced
    absent or present runs either branch on any CPU; forced present on a CPU that lacks it,
    the plugin compiles for what it can and the record follows its read-back."""
    from xpuruntime.npu import openvino_backend

    caps = _cpu_capabilities()
    if forced is not None:
        real = openvino_backend.capabilities
        caps = [c for c in caps if c != "FP16"] + ["FP16"] * (forced == "present")
        monkeypatch.setattr(
            openvino_backend,
            "capabilities",
            lambda device: (
                *(c for c in real(device) if c != "FP16"),
                *(["FP16"] * (forced == "present")),
            ),
        )
    session = _session(_matmul_relu(tmp_path / "m.onnx", dtype), record, fallback="allow")
    ran = _compiled_hint(session)
    assert record.precision.requested is None
    assert record.precision.chosen == ran
    if forced != "present" or "FP16" in _cpu_capabilities():
        assert ran == ("fp16" if stored == "fp16" and "FP16" in caps else "fp32")
    fell_back = [(f.requested, f.chosen) for f in record.fallbacks if f.what == "precision"]
    assert fell_back == ([] if ran == stored else [(stored, ran)])
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(dtype)
    assert np.isfinite(session.run({"x": x})["y"]).all()


def test_num_threads_beyond_the_engine_s_range_is_a_policy_error(mlp, record):
    with pytest.raises(PolicyError, match="outside the range openvino takes"):
        _session(mlp, record, num_threads=2**31)


@pytest.mark.parametrize("forced", ["f32", "i8"])
def test_a_quantized_ir_model_without_a_precision_records_what_runs(
    mlp, tmp_path, record, feeds_for, monkeypatch, forced
):
    # Precision not set: the model's own (FakeQuantize) int8 is what is asked; the record
    # says what the runtime graph runs, and a float emulation is a fact, not a fallback.
    pytest.importorskip("nncf", reason="nncf is not installed: pip install 'xpuruntime-npu[nncf]'")
    from xpuruntime.npu.engines import openvino_placement
    from xpuruntime.npu.quantize import quantize_for_openvino

    calibration = [feeds_for(mlp, seed=s) for s in range(32)]
    quantized = quantize_for_openvino(mlp, calibration, tmp_path / "mlp.int8.xml")
    monkeypatch.setattr(openvino_placement, "runtime_precision", lambda rt_info: forced)
    _session(quantized, record, fallback="error")
    assert record.precision.requested is None
    assert record.precision.chosen == {"f32": "fp32", "i8": "int8"}[forced]
    assert record.fallbacks == []
