"""Bad input: each gets a typed error saying what was wrong; the session stays usable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import (
    InferenceSession,
    InputDtypeError,
    InputError,
    InputNameError,
    InputShapeError,
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


def test_shared_symbolic_dimension_must_agree(two_inputs: Path) -> None:
    sess = InferenceSession(two_inputs, device="cpu")
    # ONNX Runtime would broadcast (1, 4) against (3, 4); the model says both are "batch".
    with pytest.raises(InputShapeError, match="dimension 'batch' is 3 in input 'a' but 1"):
        sess.run({"a": np.ones((3, 4), np.float32), "b": np.ones((1, 4), np.float32)})


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
