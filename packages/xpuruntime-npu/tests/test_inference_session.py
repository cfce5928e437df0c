"""The NPU engines through xpuruntime.inference.InferenceSession, as the seed (004 §7) uses them:

    InferenceSession("model.onnx", device="npu", backend="openvino"  # or "qnn"
                     exec_policy=ExecutionPolicy(precision="int8", static_shape=True))

No NPU is present here, so device="npu" falls back (openvino: CPU plugin; qnn: the HTP
simulator) under the policy's fallback mode, and the record says so.
"""

from __future__ import annotations

import json

import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.npu.errors import QuantizedModelRequiredError
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import FallbackWarning

INT8_REL = 8e-2

pytestmark = pytest.mark.usefixtures("npu_absent")


def _seed_session(model, backend, quantized, fallback="warn"):
    policy = ExecutionPolicy(
        precision="int8", static_shape=True, quantized_model=str(quantized), fallback=fallback
    )
    return InferenceSession(str(model), device="npu", backend=backend, exec_policy=policy)


def test_seed_example_openvino(cnn, tmp_path, feeds_for, ort_reference, close):
    pytest.importorskip("nncf", reason="nncf is not installed: pip install 'xpuruntime-npu[nncf]'")
    from xpuruntime.npu.quantize import quantize_for_openvino

    quantized = quantize_for_openvino(
        cnn, [feeds_for(cnn, seed=s) for s in range(32)], tmp_path / "q.xml"
    )
    with pytest.warns(FallbackWarning, match="NPU"):
        session = _seed_session(cnn, "openvino", quantized)
    feeds = feeds_for(cnn, seed=7)
    close(session.run(feeds), ort_reference(cnn, feeds), rel=INT8_REL)
    record = json.loads(session.record().to_json())
    assert record["engine"]["chosen"] == "openvino"
    assert record["device"]["chosen"] == "CPU"
    assert record["precision"]["chosen"] == "int8"
    assert record["fallbacks"][0]["requested"] == "NPU"


def test_seed_example_qnn(cnn, tmp_path, feeds_for, ort_reference, close):
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn is not installed")
    from xpuruntime.npu.quantize import quantize_for_qnn

    quantized = quantize_for_qnn(
        cnn, [feeds_for(cnn, seed=s) for s in range(32)], tmp_path / "q.onnx"
    )
    with pytest.warns(FallbackWarning, match="npu"):
        session = _seed_session(cnn, "qnn", quantized)
    feeds = feeds_for(cnn, seed=7)
    close(session.run(feeds), ort_reference(cnn, feeds), rel=INT8_REL)
    record = json.loads(session.record().to_json())
    assert record["engine"]["chosen"] == "qnn"
    assert record["device"]["chosen"] == "cpu"
    assert "HTP simulator" in record["device"]["reason"]
    assert all(
        n["chosen"] == "QNNExecutionProvider"
        for n in record["nodes"]
        if n["op_type"] not in ("QuantizeLinear", "DequantizeLinear")
    )


@pytest.mark.parametrize("backend", ["openvino", "qnn"])
def test_seed_example_without_a_quantized_model(cnn, backend):
    pytest.importorskip("openvino" if backend == "openvino" else "onnxruntime_qnn")
    policy = ExecutionPolicy(precision="int8", static_shape=True, fallback="allow")
    with pytest.raises(QuantizedModelRequiredError, match="quantized_model"):
        InferenceSession(str(cnn), device="npu", backend=backend, exec_policy=policy)


@pytest.mark.parametrize("backend", ["openvino", "qnn"])
def test_npu_required_strictly(mlp, backend):
    pytest.importorskip("openvino" if backend == "openvino" else "onnxruntime_qnn")
    with pytest.raises(FallbackError):
        InferenceSession(
            str(mlp), device="npu", backend=backend, exec_policy=ExecutionPolicy(fallback="error")
        )


def test_engine_auto_finds_openvino_for_the_cpu(mlp, feeds_for, ort_reference, close):
    pytest.importorskip("openvino")
    policy = ExecutionPolicy(engines=["openvino"], fallback="error")
    session = InferenceSession(str(mlp), device="cpu", exec_policy=policy)
    assert session.record().engine.chosen == "openvino"
    feeds = feeds_for(mlp)
    close(session.run(feeds), ort_reference(mlp, feeds), rel=1e-5)
