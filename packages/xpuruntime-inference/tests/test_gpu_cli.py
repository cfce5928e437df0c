"""The command line and engine logs on a CUDA machine (the device machine): CUDA sessions
keep ONNX Runtime's own messages off the terminal, flags reach the CUDA EP, bench runs
concurrent requests on one CUDA session."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.cli import main
from xpuruntime.inference.demo import DEMO_MODEL

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device", "cuda_ep")]


def test_cuda_session_messages_go_through_logging(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="xpuruntime.engine")
    with InferenceSession(DEMO_MODEL, device="cuda", engine="onnxruntime") as sess:
        assert sess.device.startswith("cuda")
    assert "onnxruntime:" not in capfd.readouterr().err  # nothing raw on the terminal
    for record in caplog.records:  # what ONNX Runtime said arrived as log records
        assert record.name == "xpuruntime.engine.onnxruntime"


def test_run_on_cuda_with_fallback_error() -> None:
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(DEMO_MODEL),
            "--device",
            "cuda",
            "--fallback",
            "error",
            "--dim",
            "batch=2",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["device"].startswith("cuda")
    assert data["record"]["policy_sources"]["execution.fallback"] == "argument"
    assert "onnxruntime:" not in result.stderr


def test_bench_concurrency_on_cuda() -> None:
    result = CliRunner().invoke(
        main,
        ["bench", str(DEMO_MODEL), "--device", "cuda", "--dim", "batch=8", "-n", "200",
         "--concurrency", "4", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["device"].startswith("cuda")
    assert data["iterations"] >= 200
    assert data["concurrency"] == 4
