"""Real QNN sessions: ONNX Runtime + the onnxruntime-qnn plugin EP, HTP backend.

On x86_64 the QNN EP's only device is the host CPU, where the HTP backend runs QNN's HTP
simulator; that is what runs here (device="cpu"). Tolerances against ONNX Runtime's CPU EP:
fp32 2e-3 of the output scale (HTP float32 is not IEEE-exact: up to ~6e-4 measured), fp16
1e-2, int8/uint8 QDQ 8e-2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "onnxruntime_qnn", reason="onnxruntime-qnn is not installed: pip install 'xpuruntime-npu[qnn]'"
)

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.npu.engines.qnn import QNNEngine
from xpuruntime.npu.errors import QuantizedModelRequiredError, StaticShapeRequiredError
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning

QNN_EP = "QNNExecutionProvider"
TOLERANCE = {"fp32": 2e-3, "fp16": 1e-2, "int8": 8e-2}


def _session(model, record, device="cpu", **policy):
    from xpuruntime.policies import ExecutionPolicy

    return QNNEngine().create_session(
        Path(model),
        device=device,
        exec_policy=ExecutionPolicy(**policy),
        kernel_policy=None,
        record=record,
    )


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_htp_agrees_with_onnxruntime_cpu(
    request, model_name, precision, record, feeds_for, ort_reference, close
):
    model = request.getfixturevalue(model_name)
    feeds = feeds_for(model)
    # onnxruntime-qnn 2.x turns HTP fp16 on only with the SoC named (69: SM8650).
    soc = {"engine_options": {"qnn": {"soc_model": "69"}}} if precision == "fp16" else {}
    session = _session(model, record, precision=precision, **soc)
    close(session.run(feeds), ort_reference(model, feeds), rel=TOLERANCE[precision])
    assert record.fallbacks == []
    assert record.nodes
    assert all(n.chosen == QNN_EP for n in record.nodes)
    assert record.precision.chosen == precision
    assert "HTP simulator" in record.device.reason


def test_dynamic_batch_is_pinned_by_input_shapes(
    dynamic_mlp, record, feeds_for, ort_reference, close
):
    session = _session(dynamic_mlp, record, static_shape=True, input_shapes={"x": [3, 16]})
    assert session.inputs[0].shape == (3, 16)
    feeds = feeds_for(dynamic_mlp, batch=3)
    close(session.run(feeds), ort_reference(dynamic_mlp, feeds), rel=TOLERANCE["fp32"])
    assert all(n.chosen == QNN_EP for n in record.nodes)


def test_dynamic_batch_without_static_shapes_is_a_clear_error(dynamic_mlp, record):
    with pytest.raises(
        StaticShapeRequiredError, match=r"runs fixed shapes only.*input_shapes=\{'x': \[1, 16\]\}"
    ):
        _session(dynamic_mlp, record)


def test_int8_without_a_quantized_model_says_how_to_make_one(mlp, record):
    with pytest.raises(QuantizedModelRequiredError, match="quantize_for_qnn"):
        _session(mlp, record, precision="int8", static_shape=True)


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_int8_qdq_model_runs_on_htp(
    request, model_name, tmp_path, record, feeds_for, ort_reference, close
):
    from xpuruntime.npu.quantize import quantize_for_qnn

    model = request.getfixturevalue(model_name)
    calibration = [feeds_for(model, seed=s) for s in range(32)]
    qdq = quantize_for_qnn(model, calibration, tmp_path / "model.qdq.onnx")
    session = _session(
        model,
        record,
        precision="int8",
        static_shape=True,
        quantized_model=str(qdq),
        fallback="error",
    )
    feeds = feeds_for(model, seed=99)
    close(session.run(feeds), ort_reference(model, feeds), rel=TOLERANCE["int8"])
    assert record.precision.chosen == "int8"
    on_qnn = [n for n in record.nodes if n.chosen == QNN_EP]
    assert on_qnn
    assert record.fallbacks == []


@pytest.mark.usefixtures("npu_absent")
class TestNpuAbsent:
    """No Qualcomm NPU here: device='npu' under each fallback mode."""

    def test_error_raises_listing_the_devices(self, mlp, record):
        with pytest.raises(FallbackError, match=r"no npu device here; its devices: \['cpu'\]"):
            _session(mlp, record, device="npu", fallback="error")

    def test_warn_runs_on_the_simulator_and_records(
        self, mlp, record, feeds_for, ort_reference, close
    ):
        with pytest.warns(FallbackWarning, match="npu"):
            session = _session(mlp, record, device="npu", fallback="warn")
        assert [(f.requested, f.chosen, f.mode) for f in record.fallbacks] == [
            ("npu", "cpu", "warn")
        ]
        feeds = feeds_for(mlp)
        close(session.run(feeds), ort_reference(mlp, feeds), rel=TOLERANCE["fp32"])

    def test_allow_records_without_warning(self, mlp, record):
        _session(mlp, record, device="npu:0", fallback="allow")
        assert [(f.requested, f.mode) for f in record.fallbacks] == [("npu:0", "allow")]
        assert record.device.chosen == "cpu"


def test_unknown_device_lists_what_exists(mlp, record):
    with pytest.raises(DeviceNotFoundError, match=r"'cpu'"):
        _session(mlp, record, device="dsp")


def test_precision_htp_cannot_run(mlp, record):
    with pytest.raises(FallbackError, match="cannot apply tf32"):
        _session(mlp, record, precision="tf32", fallback="error")
    warned = ExecutionRecord(kind="inference")
    with pytest.warns(FallbackWarning, match="bf16"):
        _session(mlp, warned, precision="bf16", fallback="warn")
    assert warned.precision.chosen == "fp32"
    # onnxruntime-qnn enables HTP fp16 only with the SoC named (engine_options soc_model).
    with pytest.raises(FallbackError, match="cannot apply fp16"):
        _session(mlp, ExecutionRecord(kind="inference"), precision="fp16", fallback="error")


def _raw_ort_with_qnn_options(model, options):
    """What raw ONNX Runtime does with these QNN EP options: the session's providers, or the
    exception it raises (onnxruntime <= 1.31 retries on the CPU EP; later releases raise)."""
    import contextlib
    import io
    import warnings

    import onnxruntime as ort

    from xpuruntime.npu import qnn_backend

    device = next(d for d in qnn_backend.devices() if d.name == "cpu")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_provider_for_devices(
        [device.ep_device], {"backend_path": qnn_backend.backend_library("htp"), **options}
    )
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ort.InferenceSession(str(model), sess_options=so).get_providers()
    except Exception as exc:
        return exc


@pytest.mark.parametrize("mode", ["error", "allow"])
def test_ep_start_failure_is_not_a_silent_cpu_run(mlp, record, mode):
    # bf16 without a SoC >= 88 makes the QNN EP refuse to start. Raw ONNX Runtime either
    # retries quietly on its CPU EP (<= 1.31: here a recorded fallback) or raises (here a
    # typed error); what it does on the installed release decides what is expected.
    options = {"htp_bf16_enable": "1"}
    raw = _raw_ort_with_qnn_options(mlp, options)
    if isinstance(raw, Exception):
        with pytest.raises(UnsupportedOperationError, match="QNN EP failed to start"):
            _session(mlp, record, engine_options={"qnn": options}, fallback=mode)
        return
    assert QNN_EP not in raw  # the silent retry happened in raw ONNX Runtime
    if mode == "error":
        with pytest.raises(FallbackError, match="QNN EP failed to start"):
            _session(mlp, record, engine_options={"qnn": options}, fallback=mode)
        return
    _session(mlp, record, engine_options={"qnn": options}, fallback=mode)
    fallback = record.fallbacks[0]
    assert (fallback.what, fallback.chosen) == ("execution provider", "CPUExecutionProvider")
    assert "soc_model" in fallback.reason
    assert all(n.chosen == "CPUExecutionProvider" for n in record.nodes)


def test_backend_not_shipped_in_the_wheel(mlp, record):
    with pytest.raises(PolicyError, match="cpu backend library is not shipped"):
        _session(mlp, record, engine_options={"qnn": {"backend_type": "cpu"}})


def test_bad_htp_performance_mode(mlp, record):
    with pytest.raises(PolicyError, match=r"valid: .*'burst'"):
        _session(mlp, record, engine_options={"qnn": {"htp_performance_mode": "turbo"}})


def test_performance_hint_maps_to_htp_mode(mlp, record):
    _session(mlp, record, performance_hint="throughput")
    setting = next(s for s in record.settings if s.name == "performance_hint")
    assert setting.applied == "htp_performance_mode=sustained_high_performance"


def test_context_binary_cache(mlp, tmp_path, feeds_for):
    cache_dir = str(tmp_path / "cache")
    first, second = ExecutionRecord(kind="inference"), ExecutionRecord(kind="inference")
    a = _session(mlp, first, cache_dir=cache_dir)
    b = _session(mlp, second, cache_dir=cache_dir)
    assert first.cache["qnn"]["hit"] is False
    assert first.cache["qnn"]["stored"] is True
    assert second.cache["qnn"]["hit"] is True
    assert [n.op_type for n in second.nodes] == ["EPContext"]
    feeds = feeds_for(mlp)
    np.testing.assert_array_equal(a.run(feeds)["y"], b.run(feeds)["y"])


def test_auto_picks_what_exists_without_a_fallback(mlp, record):
    _session(mlp, record, device="auto", fallback="error")
    assert record.device.chosen == "cpu"
    assert record.fallbacks == []


@pytest.mark.parametrize("device", ["gpu", "cuda:0"])
def test_absent_gpu_falls_back_to_the_cpu_device(mlp, record, device):
    with pytest.raises(FallbackError, match=device):
        _session(mlp, record, device=device, fallback="error")


def test_a_cached_context_model_that_fails_to_load_is_discarded_and_rebuilt(
    mlp, tmp_path, feeds_for, ort_reference, close
):
    # An entry that verifies (its files are the ones stored) but that ONNX Runtime cannot
    # load, as ONNX Runtime's own EPContext model of a model with CPU-fallback nodes was.
    from xpuruntime.inference.cache import CacheKey, ContentCache

    cache_dir = str(tmp_path / "cache")
    first = ExecutionRecord(kind="inference")
    _session(mlp, first, cache_dir=cache_dir)
    key = CacheKey("qnn", first.cache["qnn"]["components"])
    entry = Path(first.cache["qnn"]["path"])
    import shutil

    shutil.rmtree(entry)
    lookup = ContentCache(cache_dir, "qnn").lookup(key)
    (lookup.entry / "model_ctx.onnx").write_bytes(b"\x08\x07" + bytes(64))
    assert lookup.commit()
    second = ExecutionRecord(kind="inference")
    session = _session(mlp, second, cache_dir=cache_dir)
    assert second.cache["qnn"]["hit"] is False
    assert "failed to load" in second.cache["qnn"]["explanation"]
    assert second.cache["qnn"]["stored"] is True
    feeds = feeds_for(mlp)
    close(session.run(feeds), ort_reference(mlp, feeds), rel=TOLERANCE["fp32"])
    third = ExecutionRecord(kind="inference")
    _session(mlp, third, cache_dir=cache_dir)
    assert third.cache["qnn"]["hit"] is True


def test_string_inputs_run_as_onnx_runtime_runs_them(tmp_path):
    # The string Identity runs on ONNX Runtime's CPU EP (QNN has no string tensors): a
    # recorded fallback, and every string form ONNX Runtime takes is taken.
    from onnx import TensorProto, helper

    from xpuruntime.inference import InferenceSession

    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["same"], name="id")],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "strings.onnx"
    path.write_bytes(model.SerializeToString())
    session = InferenceSession(path, engine="qnn", device="cpu", fallback="allow")
    for feed in (np.array(["a", "bc"]), np.array([1, 2]).astype("str"), ["a", "bc"]):
        assert list(session.run({"text": feed})["same"]) == [str(v) for v in feed]


def test_lockfile_records_and_replays_the_provider_options(mlp, tmp_path):
    # QNN locks the way every kit engine does: the provider options it ran with, checked
    # again on replay; a replay under other options is refused through the fallback mode.
    from xpuruntime.inference import InferenceSession

    lock = str(tmp_path / "qnn.lock.json")
    recorded = InferenceSession(mlp, engine="qnn", device="cpu", lock="record", lock_file=lock)
    (decision,) = recorded.record().decisions
    assert (decision.status, decision.kernel) == ("decided", "QNN htp")
    replayed = InferenceSession(mlp, engine="qnn", device="cpu", lock="replay", lock_file=lock)
    assert [d.status for d in replayed.record().decisions] == ["locked"]
    with pytest.raises(FallbackError, match="htp_performance_mode"):
        InferenceSession(
            mlp, engine="qnn", device="cpu", lock="replay", lock_file=lock,
            performance_hint="throughput", fallback="error",
        )  # fmt: skip


def test_an_htp_memory_failure_is_a_memory_error_naming_fp16(mlp):
    # A valid model the HTP float path cannot hold (the message QNN gives for it, from a
    # public model); what to try includes fp16, which runs it.
    from xpuruntime.inference.errors import EngineMemoryError
    from xpuruntime.inference.kit import BuildPlan
    from xpuruntime.npu.engines.qnn import QNNAdapter
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.decisions import Decisions

    adapter = QNNAdapter()
    decisions = Decisions(ExecutionPolicy(), record=ExecutionRecord(kind="inference"))
    plan = BuildPlan(
        model=mlp, info=None, policy=decisions.policy, target=adapter.target("cpu", decisions),
        precision="fp32", free_dims={}, shapes={}, kernel_options={},
    )  # fmt: skip
    failure = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : QNN_COMMON_ERROR_MEM_ALLOC: Failed to finalize QNN graph"
    )
    error = adapter.build_error(failure, plan)
    assert isinstance(error, EngineMemoryError)
    assert isinstance(error, MemoryError)
    assert "precision='fp16'" in str(error)
