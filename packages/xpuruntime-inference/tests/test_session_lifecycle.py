"""What a session is made from (path, bytes, ModelProto), what it leaves behind (nothing),
and where ONNX Runtime's own messages go (Python logging)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.engine_logs import native_stderr_to_logging, parse_native_line
from xpuruntime.inference.errors import ModelTypeError, SessionClosedError
from xpuruntime.policies import ExecutionPolicy, layered_policy

X = {"input": np.ones((2, 4), np.float32)}


def _temp_folders(prefix: str) -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{prefix}*"))


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "proto"])
def test_model_from_memory(mlp: Path, kind: str) -> None:
    expected = InferenceSession(mlp, device="cpu").run(X)["output"]
    data = mlp.read_bytes()
    model: object = {
        "bytes": data,
        "bytearray": bytearray(data),
        "proto": onnx.load(str(mlp)),
    }[kind]
    before = _temp_folders("xpuruntime-model-")
    with InferenceSession(model, device="cpu") as sess:  # type: ignore[arg-type]
        np.testing.assert_array_equal(sess.run(X)["output"], expected)
        assert sess.record().model.startswith("<in-memory")
        assert "sha256" in sess.record().model
    assert _temp_folders("xpuruntime-model-") == before  # the temporary copy is gone


def test_model_of_another_type_is_a_typed_error() -> None:
    with pytest.raises(ModelTypeError, match=r"path .*bytes.*onnx\.ModelProto; got builtins\.list"):
        InferenceSession([1, 2, 3], device="cpu")  # type: ignore[arg-type]
    assert issubclass(ModelTypeError, TypeError)


def test_closed_session_refuses_to_run(mlp: Path) -> None:
    sess = InferenceSession(mlp, device="cpu")
    sess.close()
    sess.close()  # twice is fine
    with pytest.raises(SessionClosedError, match="was closed"):
        sess.run(X)


def test_profiling_leaves_no_temporary_folder(mlp: Path, tmp_path: Path) -> None:
    before = _temp_folders("xpuruntime-ort-profile-")
    with InferenceSession(mlp, device="cpu", exec_policy=ExecutionPolicy(profiling=True)) as sess:
        sess.run(X)
        assert len(_temp_folders("xpuruntime-ort-profile-") - before) == 1
        sess.export_trace(tmp_path / "trace.json")
    assert _temp_folders("xpuruntime-ort-profile-") == before
    assert (tmp_path / "trace.json").stat().st_size > 0

    collected = InferenceSession(mlp, device="cpu", exec_policy=ExecutionPolicy(profiling=True))
    collected.run(X)
    del collected  # no close(): the finaliser cleans up
    assert _temp_folders("xpuruntime-ort-profile-") == before


def test_layered_policy_sources_reach_the_record(mlp: Path) -> None:
    layered = layered_policy(
        ExecutionPolicy(num_threads=1),
        arguments={"execution": {"device": "cpu"}},
        environ={"XPURUNTIME_POLICY_GRAPH_OPTIMIZATION": "basic"},
    )
    record = InferenceSession(mlp, exec_policy=layered).record()
    assert record.policy_sources == {
        "execution.num_threads": "policy",
        "execution.graph_optimization": ("environment (XPURUNTIME_POLICY_GRAPH_OPTIMIZATION)"),
        "execution.device": "argument",
    }
    assert record.device is not None
    assert record.device.chosen == "cpu"


def test_native_stderr_goes_to_logging(caplog: pytest.LogCaptureFixture) -> None:
    import os

    caplog.set_level(logging.DEBUG, logger="xpuruntime.engine")
    with native_stderr_to_logging("onnxruntime", "warning"):
        os.write(
            2,
            b"\x1b[0;93m2026-11-23 16:24:15.2 [W:onnxruntime:Default, provider_policy.cc:12 "
            b"Select] No registered plugin EP device found for 'CUDAExecutionProvider'\x1b[m\n"
            b"2026-11-23 16:24:15.3 [I:onnxruntime:, inference_session.cc:1 Init] chatter\n",
        )
    (record,) = caplog.records
    assert record.name == "xpuruntime.engine.onnxruntime"
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("No registered plugin EP device found")
    assert parse_native_line("plain text") == (logging.WARNING, "plain text")


def test_onnxruntime_messages_follow_engine_log_level(
    mlp: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="xpuruntime.engine")
    policy = ExecutionPolicy(engine_log_level="verbose")
    InferenceSession(mlp, device="cpu", exec_policy=policy)
    messages = [r for r in caplog.records if r.name == "xpuruntime.engine.onnxruntime"]
    assert any("Session successfully initialized" in r.getMessage() for r in messages)
    # What ONNX Runtime says while the session is created reaches logging, not the terminal.
    # (Its thread pool's verbose lines may come later, from its own threads: not captured.)
    assert "Session successfully initialized" not in capfd.readouterr().err
    caplog.clear()
    quiet = InferenceSession(mlp, device="cpu", exec_policy=ExecutionPolicy())
    assert not [r for r in caplog.records if r.levelno < logging.WARNING]
    assert any(s.name == "engine_log_level" for s in quiet.record().settings)
