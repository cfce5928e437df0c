"""What ONNX Runtime prints while runs are in flight goes through Python logging; everything
else written to stderr reaches it unchanged. Each case runs in its own interpreter: the relay
owns file descriptor 2 of the process, which pytest's own capture must keep."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from xpuruntime.inference.engine_logs import _openvino_message, route_openvino_log

# A model whose declared output shape ({1}) is not what a run produces ({2}): ONNX Runtime
# warns about it on every run (execution_frame.cc VerifyOutputSizes), not at session creation.
_RUN_TIME_WARNING = "does not match actual shape"


def _mismatch_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _run(script: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    # Decoded by hand: text mode would turn the carriage returns under test into newlines.
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def test_run_time_warnings_go_to_logging_and_other_stderr_passes(tmp_path: Path) -> None:
    model = _mismatch_model(tmp_path / "mismatch.onnx")
    log = tmp_path / "log.txt"
    done = _run(
        f"""
        import logging, sys, threading
        import numpy as np
        from xpuruntime.inference import InferenceSession
        logging.basicConfig(filename={str(log)!r}, level=logging.WARNING,
                            format="%(name)s|%(levelname)s|%(message)s")
        session = InferenceSession({str(model)!r}, device="cpu")
        runs = [threading.Thread(target=session.run, args=({{"x": np.ones(2, np.float32)}},))
                for _ in range(4)]
        for t in runs: t.start()
        for t in runs: t.join()
        print("plain line from Python", file=sys.stderr, flush=True)
        sys.stderr.write("progress 50%\\r"); sys.stderr.flush()
        print("stdout untouched")
        """
    )
    assert done.returncode == 0, done.stderr
    # Nothing of ONNX Runtime's reaches the terminal raw ...
    assert _RUN_TIME_WARNING not in done.stderr
    assert "onnxruntime:" not in done.stderr
    # ... every other byte does, in order, partial line included, and stdout is not touched.
    assert "plain line from Python\nprogress 50%\r" in done.stderr
    assert done.stdout == "stdout untouched\n"
    # The four runs' warnings are in the engine's logger, with ONNX Runtime's severity.
    logged = [line for line in log.read_text().splitlines() if _RUN_TIME_WARNING in line]
    assert len(logged) == 4
    assert all(line.startswith("xpuruntime.engine.onnxruntime|WARNING|") for line in logged)


def test_engine_log_level_error_keeps_run_time_warnings_out(tmp_path: Path) -> None:
    model = _mismatch_model(tmp_path / "mismatch.onnx")
    log = tmp_path / "log.txt"
    done = _run(
        f"""
        import logging
        import numpy as np
        from xpuruntime.inference import InferenceSession
        logging.basicConfig(filename={str(log)!r}, level=logging.DEBUG)
        session = InferenceSession({str(model)!r}, device="cpu", engine_log_level="error")
        session.run({{"x": np.ones(2, np.float32)}})
        """
    )
    assert done.returncode == 0, done.stderr
    assert _RUN_TIME_WARNING not in done.stderr
    assert _RUN_TIME_WARNING not in log.read_text()


def test_a_crash_message_written_before_exit_is_not_lost(tmp_path: Path) -> None:
    model = _mismatch_model(tmp_path / "mismatch.onnx")
    done = _run(
        f"""
        import os
        from xpuruntime.inference import InferenceSession
        InferenceSession({str(model)!r}, device="cpu")
        raise SystemExit("fatal: the last words")
        """
    )
    assert done.returncode == 1
    assert done.stderr.endswith("fatal: the last words\n")


def test_openvino_messages_keep_their_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="xpuruntime.engine.openvino")
    _openvino_message(b"[ INFO ] plugin chatter")
    _openvino_message(b"\x1b[33m[WARNING] layout guessed\x1b[0m")
    _openvino_message(b"no level at all")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "plugin chatter"),
        (logging.WARNING, "layout guessed"),
        (logging.WARNING, "no level at all"),
    ]


def test_openvino_log_callback_is_installed_through_its_c_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    openvino = pytest.importorskip("openvino")
    callback = route_openvino_log(openvino)
    assert callback is not None, "this openvino has libopenvino_c with ov_util_set_log_callback"
    assert route_openvino_log(openvino) is callback  # installed once
    caplog.set_level(logging.DEBUG, logger="xpuruntime.engine.openvino")
    callback(b"[ ERROR ] through the C function pointer")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "through the C function pointer")
    ]
