"""The ``xpuruntime`` command line, through click's CliRunner, on real sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from xpuruntime.inference.cli import main


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "250"})  # wide enough that no cell is folded


def invoke(runner: CliRunner, *args: str) -> Any:
    result = runner.invoke(main, list(args), catch_exceptions=False)
    return result


def test_engines_lists_available_and_missing(runner: CliRunner) -> None:
    result = invoke(runner, "engines")
    assert result.exit_code == 0, result.output
    assert "onnxruntime" in result.output
    assert "available" in result.output
    assert "tensorrt" in result.output
    assert "xpuruntime[tensorrt]" in result.output  # the install hint of an unavailable one


def test_devices(runner: CliRunner) -> None:
    result = invoke(runner, "devices")
    assert result.exit_code == 0, result.output
    assert "cpu" in result.output


def test_run_prints_outputs_and_writes_record(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 4), np.float32))
    result = invoke(
        runner,
        "run",
        str(mlp),
        "--device",
        "cpu",
        "--input",
        f"input={x}",
        "--record",
        str(record),
        "--save-outputs",
        str(tmp_path / "out"),
    )
    assert result.exit_code == 0, result.output
    assert "output" in result.output
    assert "(3, 3)" in result.output
    assert json.loads(record.read_text())["kind"] == "inference"
    assert np.load(tmp_path / "out" / "output.npy").shape == (3, 3)


def test_run_reports_bad_input_name(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 4), np.float32))
    result = invoke(runner, "run", str(mlp), "--input", f"inptu={x}")
    assert result.exit_code != 0
    assert "InputNameError" in result.output
    assert "did you mean 'input'" in result.output


def test_bench_writes_percentiles(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = invoke(
        runner,
        "bench",
        str(mlp),
        "--device",
        "cpu",
        "--dim",
        "batch=8",
        "--warmup",
        "2",
        "-n",
        "30",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert "p99" in result.output
    data = json.loads(out.read_text())
    assert data["iterations"] == 30
    assert data["batch"] == 8
    latency = data["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    assert data["throughput_samples_per_s"] == pytest.approx(8 * data["throughput_runs_per_s"])


def test_compare_same_engine_passes(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    report = tmp_path / "compare.json"
    result = invoke(
        runner,
        "compare",
        str(mlp),
        "--engines",
        "onnxruntime:cpu,onnxrt:cpu",
        "--per-layer",
        "--json",
        str(report),
    )
    assert result.exit_code == 0, result.output
    assert "pass" in result.output
    assert "no intermediate tensor diverges" in result.output
    data = json.loads(report.read_text())
    assert data["outputs"][0]["max_abs"] == 0.0


def test_compare_reports_targets_that_cannot_run(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "compare", str(mlp), "--engines", "onnxruntime:cpu,tensorrt:cuda")
    assert result.exit_code == 1
    assert "tensorrt:cuda" in result.output
    assert "EngineNotInstalledError" in result.output


def test_compare_needs_two_targets(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "compare", str(mlp), "--engines", "onnxruntime:cpu")
    assert result.exit_code != 0
    assert "at least two" in result.output


def test_explain_prints_the_record(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    result = invoke(
        runner, "explain", str(mlp), "--device", "cpu", "--runs", "2", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "Settings" in result.output
    assert "CPUExecutionProvider" in result.output
    assert len(json.loads(out.read_text())["runs"]) == 2


def test_policy_file_drives_the_session(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "schema_version: 1\nexecution:\n  graph_optimization: basic\n  num_threads: 1\n"
    )
    result = invoke(runner, "explain", str(mlp), "--device", "cpu", "--policy", str(policy))
    assert result.exit_code == 0, result.output
    assert "ORT_ENABLE_BASIC" in result.output


def test_policy_group_is_mounted(runner: CliRunner) -> None:
    result = invoke(runner, "policy", "--help")
    assert result.exit_code == 0, result.output


def test_missing_model_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, "run", str(tmp_path / "missing.onnx"))
    assert result.exit_code != 0
    assert "ModelNotFoundError" in result.output
