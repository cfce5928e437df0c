"""Bad input: each gets a typed error saying what was wrong; the session stays usable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from xpuruntime.inference import (
    EngineRunError,
    InferenceSession,
    InputDtypeError,
    InputError,
    InputNameError,
    InputShapeError,
    InputShapeWarning,
    InvalidModelError,
    ModelNotFoundError,
)
from xpuruntime.policies.errors import PolicyError, XpuRuntimeError
from xpuruntime.runtime.errors import EngineNotInstalledError


@pytest.fixture
def sess(mlp: Path) -> InferenceSession:
    return InferenceSession(mlp, device="cpu")


GOOD = {"input": np.ones((2, 4), np.float32)}


def test_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist") as info:
        InferenceSession(tmp_path / "nope.onnx")
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, XpuRuntimeError)


def test_corrupt_model(tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(InvalidModelError, match="not a readable ONNX model"):
        InferenceSession(bad, device="cpu")


def test_truncated_model(mlp: Path) -> None:
    data = mlp.read_bytes()
    mlp.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModelError):
        InferenceSession(mlp, device="cpu")


def test_unknown_input_name_lists_expected(sess: InferenceSession) -> None:
    with pytest.raises(InputNameError) as info:
        sess.run({"inptu": GOOD["input"]})
    message = str(info.value)
    assert "unknown input 'inptu' (did you mean 'input'?)" in message
    assert "The model's inputs are: input: float32[batch, 4]" in message


def test_missing_input(two_inputs: Path) -> None:
    sess = InferenceSession(two_inputs, device="cpu")
    with pytest.raises(InputNameError, match=r"missing input\(s\) 'b'"):
        sess.run({"a": np.ones((1, 4), np.float32)})


def test_wrong_dtype_says_expected_and_got(sess: InferenceSession) -> None:
    with pytest.raises(InputDtypeError, match="expects dtype float32, got float64") as info:
        sess.run({"input": np.ones((2, 4))})
    assert isinstance(info.value, TypeError)


def test_wrong_rank_and_dimension(sess: InferenceSession) -> None:
    with pytest.raises(InputShapeError, match=r"expects rank 2 .* got shape \(4,\)"):
        sess.run({"input": np.ones(4, np.float32)})
    with pytest.raises(InputShapeError, match=r"dimension 1 to be 4 .* got shape \(2, 5\)"):
        sess.run({"input": np.ones((2, 5), np.float32)})


def test_shared_dimension_name_that_disagrees_is_a_warning(two_inputs: Path) -> None:
    sess = InferenceSession(two_inputs, device="cpu")
    # Both inputs are "batch", but ONNX Runtime broadcasts (1, 4) against (3, 4) and runs:
    # xpuruntime runs it too, and says so once.
    feeds = {"a": np.ones((3, 4), np.float32), "b": np.ones((1, 4), np.float32)}
    with pytest.warns(InputShapeWarning, match=r"dimension 'batch' is 3 in input 'a' \(axis 0\)"):
        out = sess.run(feeds)
    np.testing.assert_array_equal(out["sum"], np.full((3, 4), 2, np.float32))
    sess.run(feeds)  # warned once per name (pytest's filterwarnings=error would raise here)
    assert any("dimension 'batch'" in note for note in sess.record().notes)


def test_a_disagreement_the_engine_rejects_is_named_in_its_error(two_inputs: Path) -> None:
    sess = InferenceSession(two_inputs, device="cpu")
    feeds = {"a": np.ones((3, 4), np.float32), "b": np.ones((2, 4), np.float32)}
    with pytest.warns(InputShapeWarning), pytest.raises(EngineRunError, match="'batch' is 3"):
        sess.run(feeds)


@pytest.mark.parametrize("placeholder", ["?", "", "unk__12", "-1"])
def test_placeholder_dimension_names_name_nothing(
    tmp_path: Path, make_passthrough: Any, placeholder: str
) -> None:
    # rapidocr's classifier declares x: [-1, 3, '?', '?'] and runs any height and width.
    dims = [None, 3, placeholder, placeholder]
    model = make_passthrough(tmp_path / "placeholders.onnx", [("x", TensorProto.FLOAT, dims)])
    sess = InferenceSession(model, device="cpu")
    out = sess.run({"x": np.ones((1, 3, 48, 192), np.float32)})
    assert out["x_out"].shape == (1, 3, 48, 192)
    assert not [n for n in sess.record().notes if "dimension" in n]


def test_feeds_must_be_a_mapping(sess: InferenceSession) -> None:
    with pytest.raises(InputError, match="feeds must be a mapping"):
        sess.run([GOOD["input"]])  # type: ignore[arg-type]


def test_unknown_output_name(sess: InferenceSession) -> None:
    with pytest.raises(InputNameError, match="unknown output 'outptu' \\(did you mean 'output'"):
        sess.run(GOOD, output_names=["outptu"])
    with pytest.raises(InputNameError, match="must be a list of names"):
        sess.run(GOOD, output_names="output")


def test_session_stays_usable_after_failed_runs(sess: InferenceSession) -> None:
    for bad in (
        {"input": np.ones((2, 4))},
        {"x": GOOD["input"]},
        {"input": np.ones(3, np.float32)},
    ):
        with pytest.raises(InputError):
            sess.run(bad)
    out = sess.run(GOOD)
    assert out["output"].shape == (2, 3)
    assert len(sess.record().runs) == 1  # failed runs are not recorded as runs


def test_engine_not_installed_gives_install_command(mlp: Path) -> None:
    with pytest.raises(EngineNotInstalledError, match=r"pip install 'xpuruntime\[tensorrt\]'"):
        InferenceSession(mlp, engine="tensorrt")


def test_unknown_engine_lists_known(mlp: Path) -> None:
    with pytest.raises(EngineNotInstalledError, match="unknown engine 'onnxrunt'"):
        InferenceSession(mlp, engine="onnxrunt")


def test_invalid_device_lists_valid_forms(mlp: Path) -> None:
    with pytest.raises(PolicyError, match="'cuda:N'"):
        InferenceSession(mlp, device="tpu:0")


@pytest.mark.parametrize(
    ("quantize", "suggested", "not_suggested"),
    [
        (False, ["precision='fp16' or an int8 model (half or a quarter"], []),
        (True, ["smaller inputs", "another device"], ["precision='fp16'", "int8 model"]),
    ],
)
def test_a_memory_failure_suggests_only_smaller_weights_the_model_lacks(
    mlp: Path, tmp_path: Path, quantize: bool, suggested: list[str], not_suggested: list[str]
) -> None:
    # The precision the kit reads from the model file (ModelInfo.precision): an int8 model
    # gets no "or an int8 model" (nor fp16) hint, an fp32 one both.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from xpuruntime.inference.errors import EngineMemoryError
    from xpuruntime.inference.kit.errors import build_error, memory_error
    from xpuruntime.inference.model_info import read_model_info

    model = mlp
    if quantize:
        model = tmp_path / "mlp.int8.onnx"
        quantize_dynamic(str(mlp), str(model), weight_type=QuantType.QInt8)
    precision = read_model_info(model).precision
    assert precision == ("int8" if quantize else "fp32")
    failure = RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory")
    for error in (
        memory_error(failure, engine="onnxruntime", doing="running", precision=precision),
        build_error(failure, engine="onnxruntime", model=model, precision=precision),
    ):
        assert isinstance(error, EngineMemoryError)
        for text in suggested:
            assert text in str(error)
        for text in not_suggested:
            assert text not in str(error)


def test_an_fp16_model_out_of_memory_is_pointed_at_int8_only() -> None:
    from xpuruntime.inference.kit.errors import memory_hints

    hints = "; ".join(memory_hints("fp16"))
    assert "an int8 model (half of the weights' memory)" in hints
    assert "precision='fp16'" not in hints
