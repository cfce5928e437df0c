"""The behaviour every NPU engine shares with the ONNX Runtime engine, on real sessions:
the model's own names, typed errors for damaged models and bad feeds, ``output_names``,
list feeds, closed sessions, a failed run leaving the session usable, an unusable cache
folder under the fallback mode, and precision recorded by the same rule.

Each engine runs where it is installed (OpenVINO in the dev environment, QNN in its own).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xpuruntime.inference.errors import (  # noqa: E402
    InputError,
    InvalidModelError,
    SessionClosedError,
)
from xpuruntime.policies import ExecutionPolicy  # noqa: E402
from xpuruntime.runtime.errors import FallbackError, UnsupportedOperationError  # noqa: E402
from xpuruntime.runtime.record import ExecutionRecord, FallbackWarning  # noqa: E402

ENGINES = [
    pytest.param(
        "openvino",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("openvino") is None, reason="openvino is not installed"
        ),
    ),
    pytest.param(
        "qnn",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("onnxruntime_qnn") is None,
            reason="onnxruntime-qnn is not installed",
        ),
    ),
]


def _engine(name: str):
    if name == "openvino":
        from xpuruntime.npu.engines.openvino import OpenVINOEngine

        return OpenVINOEngine()
    from xpuruntime.npu.engines.qnn import QNNEngine

    return QNNEngine()


def _session(engine, model, record=None, **policy):
    return _engine(engine).create_session(
        Path(model),
        device="cpu",
        exec_policy=ExecutionPolicy(**policy),
        kernel_policy=None,
        record=record if record is not None else ExecutionRecord(kind="inference"),
    )


def _save(graph, path: Path, opsets=(("", 17),)) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def renamed(tmp_path: Path) -> Path:
    """OpenVINO merges ``input_0`` with the no-op Cast's ``/Cast_1_output_0`` and ``output``
    with ``Add.1``, and its ``get_any_name()`` returns the internal names; two outputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["input_0"], ["/Cast_1_output_0"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["/Cast_1_output_0", "b"], ["Add.1"]),
            helper.make_node("Identity", ["Add.1"], ["output"]),
            helper.make_node("Relu", ["/Cast_1_output_0"], ["aux"]),
        ],
        "renamed",
        [helper.make_tensor_value_info("input_0", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("aux", TensorProto.FLOAT, [2, 4]),
        ],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")],
    )
    return _save(graph, tmp_path / "renamed.onnx")


@pytest.fixture(params=["empty", "truncated", "garbage", "zeros", "text"])
def damaged(request, tmp_path: Path, renamed: Path) -> Path:
    data = renamed.read_bytes()
    content = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "garbage": np.random.default_rng(3).bytes(2048),
        "zeros": bytes(2048),
        "text": b"this is not a model\n",
    }[request.param]
    path = tmp_path / f"{request.param}.onnx"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_the_model_s_own_names(engine, renamed, ort_reference):
    session = _session(engine, renamed)
    assert [i.name for i in session.inputs] == ["input_0"]
    assert [o.name for o in session.outputs] == ["output", "aux"]
    feeds = {"input_0": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    got = session.run(feeds)
    want = ort_reference(renamed, feeds)
    assert list(got) == ["output", "aux"]
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-3)
    assert list(session.run(feeds, ["aux"])) == ["aux"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_model_is_an_invalid_model_error(engine, damaged):
    with pytest.raises(InvalidModelError, match=damaged.name):
        _session(engine, damaged, static_shape=True, input_shapes={"input_0": [2, 4]})


@pytest.mark.parametrize("engine", ENGINES)
def test_output_names_and_list_feeds_as_on_onnxruntime(engine, renamed):
    session = _session(engine, renamed)
    nested = [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]  # Python floats: float64 -> float32
    everything = session.run({"input_0": nested}, [])
    assert list(everything) == ["output", "aux"]
    # Within an ulp: the HTP simulator's arithmetic need not be the CPU's to the last bit.
    np.testing.assert_allclose(everything["aux"], np.asarray(nested, np.float32), rtol=1e-6)
    with pytest.raises(InputError, match="'input_0'"):
        session.run({"input_0": [[1.0, 2.0], [3.0]]})
    assert session.run({"input_0": nested})["output"].shape == (2, 4)  # still usable


@pytest.mark.parametrize("engine", ENGINES)
def test_a_closed_session_refuses_to_run(engine, renamed):
    session = _session(engine, renamed)
    feeds = {"input_0": np.ones((2, 4), np.float32)}
    session.run(feeds)
    session.close()
    session.close()  # twice is harmless
    with pytest.raises(SessionClosedError):
        session.run(feeds)


@pytest.mark.parametrize("mode", ["warn", "error"])
@pytest.mark.parametrize("engine", ENGINES)
def test_an_unusable_cache_folder_follows_the_fallback_mode(engine, renamed, tmp_path, mode):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    policy = {"cache_dir": str(blocker), "fallback": mode}
    if mode == "error":
        with pytest.raises(FallbackError, match="cache"):
            _session(engine, renamed, **policy)
        return
    record = ExecutionRecord(kind="inference")
    with pytest.warns(FallbackWarning, match="cache"):
        session = _session(engine, renamed, record, **policy)
    assert session.run({"input_0": np.ones((2, 4), np.float32)})["aux"].shape == (2, 4)
    assert [f.chosen for f in record.fallbacks] == ["no cache"]
    assert blocker.read_text().startswith("a file")  # nothing overwritten


@pytest.fixture
def dynamic_int8(tmp_path: Path, mlp: Path) -> Path:
    """The MLP quantized dynamically (int8 weights, MatMulInteger) by onnxruntime.quantization."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    target = tmp_path / "mlp.dynamic-int8.onnx"
    quantization.quantize_dynamic(str(mlp), str(target), weight_type=quantization.QuantType.QInt8)
    return target


@pytest.mark.parametrize("engine", ENGINES)
def test_a_quantized_model_s_precision_is_recorded_like_onnxruntime(engine, dynamic_int8):
    from xpuruntime.inference.engines.onnxruntime import OnnxRuntimeEngine

    ort_record = ExecutionRecord(kind="inference")
    OnnxRuntimeEngine().create_session(
        dynamic_int8,
        device="cpu",
        exec_policy=ExecutionPolicy(fallback="allow"),
        kernel_policy=None,
        record=ort_record,
    )
    record = ExecutionRecord(kind="inference")
    try:
        _session(engine, dynamic_int8, record, fallback="allow")
    except UnsupportedOperationError:  # QNN's HTP has no MatMulInteger: CPU fallback refused?
        pytest.skip(f"{engine} cannot load the dynamically quantized model")
    assert (record.precision.requested, record.precision.chosen) == (
        ort_record.precision.requested,
        ort_record.precision.chosen,
    )
    assert record.precision.chosen == "int8"
    assert [f.chosen for f in record.fallbacks if f.what == "precision"] == [
        f.chosen for f in ort_record.fallbacks if f.what == "precision"
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_records_read_while_runs_are_in_flight(engine, renamed):
    # The Ray Serve deployment's record endpoint reads the record under load.
    from concurrent.futures import ThreadPoolExecutor

    from xpuruntime.inference import InferenceSession

    session = InferenceSession(renamed, engine=engine, device="cpu")
    feeds = {"input_0": np.ones((2, 4), np.float32)}
    runs = 200

    def run(_: int) -> None:
        for _ in range(runs):
            session.run(feeds)

    def read(_: int) -> int:
        seen = 0
        for index in range(200):
            seen = max(seen, len(session.record().runs))
            if index % 40 == 0:  # rendering costs milliseconds; the record is what races
                assert session.explain()
        return seen

    with ThreadPoolExecutor(4) as pool:
        runners = [pool.submit(run, i) for i in range(2)]
        readers = [pool.submit(read, i) for i in range(2)]
        for future in [*runners, *readers]:
            future.result()
    assert len(session.record().runs) == 2 * runs
