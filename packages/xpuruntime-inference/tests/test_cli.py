"""The ``xpuruntime`` command line through click's CliRunner, on real sessions.

One test per behaviour: exit code (0 success, 1 failure, 2 usage), a one-line message,
JSON that parses, plain text that is not wrapped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import numpy as np
import onnx
import pytest
from click.testing import CliRunner, Result
from onnx import TensorProto, helper

from xpuruntime.inference.cli import main
from xpuruntime.inference.demo import DEMO_MODEL
from xpuruntime.runtime.errors import FallbackError


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "60"})  # narrow: plain output must not wrap anyway


def invoke(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(main, list(args), env=env, catch_exceptions=False)


def one_line_error(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def npy(tmp_path: Path, name: str, array: np.ndarray) -> Path:
    path = tmp_path / name
    np.save(path, array)
    return path


# -- inventory ---------------------------------------------------------------------------


def test_engines_plain_text_is_not_wrapped(runner: CliRunner) -> None:
    result = invoke(runner, "engines")
    assert result.exit_code == 0, result.output
    (tensorrt,) = [line for line in result.stdout.splitlines() if line.startswith("tensorrt")]
    assert "pip install 'xpuruntime[tensorrt]'" in tensorrt  # the hint on the engine's line
    assert len(tensorrt) > 60  # longer than COLUMNS, still one line
    assert "│" not in result.stdout  # no box lines off a terminal
    assert result.stdout.count("xpuruntime[tensorrt]") == 1


def test_engines_json_says_only_installed_engines_are_available(runner: CliRunner) -> None:
    result = invoke(runner, "engines", "--json")
    assert result.exit_code == 0, result.output
    engines = {e["name"]: e for e in json.loads(result.stdout)["engines"]}
    assert engines["onnxruntime"]["state"] == "available"
    assert engines["tensorrt"]["state"] in ("unavailable", "not installed")
    assert engines["tensorrt"]["install_hint"]
    assert engines["onnxruntime"]["install_hint"] == ""


def test_devices_json(runner: CliRunner) -> None:
    result = invoke(runner, "devices", "--json-out", "-")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["devices"][0]["device"] == "cpu"


def test_json_is_a_flag_and_dash_goes_to_stdout(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(runner, "devices", "--json")
    assert result.exit_code == 0
    assert list(tmp_path.iterdir()) == []
    json.loads(result.stdout)


def test_unknown_engine_is_a_usage_error_listing_the_engines(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--engine", "foo", "--dim", "batch=1")
    assert result.exit_code == 2
    message = one_line_error(result)
    assert "unknown engine 'foo'" in message
    assert "onnxruntime (onnxrt, ort)" in message
    assert "tensorrt (trt)" in message


def test_known_engine_not_installed_is_a_runtime_failure_with_the_install_command(
    runner: CliRunner, mlp: Path
) -> None:
    result = invoke(runner, "run", str(mlp), "--engine", "tensorrt", "--dim", "batch=1")
    assert result.exit_code == 1
    assert "pip install 'xpuruntime[tensorrt]'" in one_line_error(result)


# -- run, inputs and shapes ------------------------------------------------------------------


def test_run_prints_outputs_and_writes_record(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    x = npy(tmp_path, "x.npy", np.ones((3, 4), np.float32))
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
    assert "(3, 3)" in result.stdout
    assert json.loads(record.read_text())["kind"] == "inference"
    assert np.load(tmp_path / "out" / "output.npy").shape == (3, 3)


def test_run_json(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--input-shapes", "input:2x4", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outputs"][0]["shape"] == [2, 3]
    assert data["record"]["kind"] == "inference"


def test_output_preview_is_truncated_with_an_ellipsis(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--dim", "batch=5")
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if "float32" in line]
    assert row.rstrip().endswith(", …]")  # 15 values, 8 shown
    small = invoke(runner, "run", str(mlp), "--dim", "batch=1")
    (row,) = [line for line in small.stdout.splitlines() if "float32" in line]
    assert "…" not in row


def test_missing_input_file_is_a_usage_error(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--input", "input=missing.npy")
    assert result.exit_code == 2
    assert "--input input=missing.npy: the file does not exist" in one_line_error(result)


def test_unreadable_input_file_is_a_usage_error(
    runner: CliRunner, mlp: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.npy"
    bad.write_text("not numpy")
    result = invoke(runner, "run", str(mlp), "--input", f"input={bad}")
    assert result.exit_code == 2
    assert "not a readable .npy file" in one_line_error(result)


def test_unknown_input_name_is_a_usage_error(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    x = npy(tmp_path, "x.npy", np.ones((1, 4), np.float32))
    result = invoke(runner, "run", str(mlp), "--input", f"inptu={x}")
    assert result.exit_code == 2
    message = one_line_error(result)
    assert "did you mean 'input'" in message
    assert "the model's inputs are input" in message


def test_unknown_dim_name_is_a_usage_error(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--dim", "N=3")
    assert result.exit_code == 2
    message = one_line_error(result)
    assert "--dim names 'N'" in message
    assert "symbolic dimensions are batch" in message


def test_unbound_dynamic_dimension_is_a_usage_error(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp))
    assert result.exit_code == 2
    message = one_line_error(result)
    assert "input[batch, 4] float32 are not bound" in message
    assert "--input-shapes input:1x4 or --dim batch=N" in message


def test_unnamed_dynamic_dimension_is_a_usage_error(
    runner: CliRunner, tmp_path: Path, build_model: Any
) -> None:
    model = build_model(
        tmp_path / "unnamed.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
    )
    result = invoke(runner, "run", str(model))
    assert result.exit_code == 2
    assert "x[?, 4] float32 are not bound" in one_line_error(result)
    ok = invoke(runner, "run", str(model), "--input-shapes", "x:[6,4]")
    assert ok.exit_code == 0, ok.output
    assert "(6, 4)" in ok.stdout


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ("inptu:1x4", "--input-shapes names 'inptu' (did you mean 'input'?)"),
        ("input:1x5", "sets dimension 1 of 'input' to 5, but the model fixes it to 4"),
        ("input:1x4x1", "gives 'input' rank 3"),
        ("input=1x4", "--input-shapes expects NAME:DIMS"),
    ],
)
def test_bad_input_shapes_are_usage_errors(
    runner: CliRunner, mlp: Path, shapes: str, message: str
) -> None:
    result = invoke(runner, "run", str(mlp), "--input-shapes", shapes)
    assert result.exit_code == 2
    assert message in one_line_error(result)


def test_shared_dimension_is_bound_by_one_input(runner: CliRunner, two_inputs: Path) -> None:
    result = invoke(runner, "run", str(two_inputs), "--input-shapes", "a:3x4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"][0]["shape"] == [3, 4]  # b got batch 3 too


def test_one_name_for_two_sizes_runs_as_the_engine_runs_it(
    runner: CliRunner, tmp_path: Path, build_model: Any
) -> None:
    # paddle2onnx names every unknown dimension '?': [?, 3, '?', '?'] takes 48x192 in ONNX
    # Runtime, so the user's shape is not refused for sharing a name.
    model = build_model(
        tmp_path / "placeholders.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3, "?", "?"])],
    )
    result = invoke(runner, "run", str(model), "--input-shapes", "x:1x3x48x192", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"][0]["shape"] == [1, 3, 48, 192]


def test_missing_model_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, "run", str(tmp_path / "missing.onnx"))
    assert result.exit_code == 2
    assert "does not exist" in one_line_error(result)


def test_every_flag_has_help() -> None:
    def walk(command: click.Command, path: str) -> list[str]:
        missing = [
            f"{path} {p.opts[0]}"
            for p in command.params
            if isinstance(p, click.Option) and not p.help and p.opts[0] not in ("--version",)
        ]
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                missing += walk(sub, f"{path} {name}")
        return missing

    assert walk(main, "xpuruntime") == []


# -- policy precedence -------------------------------------------------------------------------


def policy_file(tmp_path: Path, **execution: Any) -> Path:
    path = tmp_path / "policy.yaml"
    lines = ["schema_version: 1", "execution:", *(f"  {k}: {v}" for k, v in execution.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def explain_json(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Any:
    result = invoke(runner, "explain", *args, "--runs", "0", "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.usefixtures("without_cuda_ep")
def test_device_flag_overrides_the_policy_file(
    runner: CliRunner, mlp: Path, tmp_path: Path
) -> None:
    cpu = policy_file(tmp_path, device="cpu", fallback="allow")
    record = explain_json(runner, str(mlp), "--policy", str(cpu), "--device", "cuda")
    assert record["policy"]["execution"]["device"] == "cuda"
    assert record["policy_sources"]["execution.device"] == "argument"
    assert record["policy_sources"]["execution.fallback"] == f"policy {cpu}"
    assert record["device"]["requested"] == "cuda"  # asked for, and a recorded fallback here
    assert record["fallbacks"][0]["chosen"] == "CPUExecutionProvider"


@pytest.mark.usefixtures("without_cuda_ep")
def test_fallback_error_from_the_environment_fails_the_run(runner: CliRunner) -> None:
    result = invoke(
        runner,
        "run",
        str(DEMO_MODEL),
        "--device",
        "cuda",
        "--dim",
        "batch=1",
        env={"XPURUNTIME_POLICY_FALLBACK": "error"},
    )
    assert result.exit_code == 1
    assert "FallbackError" in one_line_error(result)


def test_misspelled_environment_variable_is_a_usage_error(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), env={"XPURUNTIME_POLICY_PRECISON": "fp16"})
    assert result.exit_code == 2
    assert "Did you mean 'XPURUNTIME_POLICY_PRECISION'?" in one_line_error(result)


def test_invalid_flag_value_from_a_policy_is_a_usage_error(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "run", str(mlp), "--device", "gpu7")
    assert result.exit_code == 2
    assert "unknown device 'gpu7'" in one_line_error(result)


@pytest.mark.usefixtures("without_cuda_ep")
def test_debug_shows_the_traceback(runner: CliRunner) -> None:
    with pytest.raises(FallbackError):
        invoke(
            runner,
            "--debug",
            "run",
            str(DEMO_MODEL),
            "--device",
            "cuda",
            "--fallback",
            "error",
        )


def test_explain_shows_where_each_setting_came_from(
    runner: CliRunner, mlp: Path, tmp_path: Path
) -> None:
    policy = policy_file(tmp_path, num_threads=1)
    result = invoke(
        runner,
        "explain",
        str(mlp),
        "--policy",
        str(policy),
        "--fallback",
        "allow",
        "--dim",
        "batch=2",
        env={"XPURUNTIME_POLICY_GRAPH_OPTIMIZATION": "basic"},
    )
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "Policy sources (argument > environment > policy file > default)" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("execution.")}
    assert rows["execution.fallback"].endswith("argument")
    assert rows["execution.graph_optimization"].endswith("(XPURUNTIME_POLICY_GRAPH_OPTIMIZATION)")
    assert rows["execution.num_threads"].endswith(f"policy {policy}")
    assert rows["execution.precision"].endswith("default")  # every setting, defaults included
    assert "environment (XPURUNTIME_POLICY_GRAPH_OPTIMIZATION)" in text
    assert f"policy {policy}" in text
    assert "ORT_ENABLE_BASIC" in text


# -- bench -------------------------------------------------------------------------------------


def test_bench_writes_no_file_unasked(
    runner: CliRunner, mlp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = invoke(runner, "bench", str(mlp), "--dim", "batch=2", "-n", "20", "--warmup", "1")
    assert result.exit_code == 0, result.output
    assert os.listdir(work) == []
    assert "p99 ms" in result.stdout
    assert "max ms" in result.stdout


def test_bench_json(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = invoke(
        runner,
        "bench",
        str(mlp),
        "--dim",
        "batch=8",
        "--warmup",
        "2",
        "-n",
        "30",
        "--json-out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["iterations"] == 30
    assert data["batch"] == 8
    latency = data["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    assert data["throughput_samples_per_s"] == pytest.approx(8 * data["throughput_runs_per_s"])


def test_bench_duration_warmup_time_and_concurrency(runner: CliRunner, mlp: Path) -> None:
    result = invoke(
        runner,
        "bench",
        str(mlp),
        "--dim",
        "batch=1",
        "--duration",
        "0.3",
        "--warmup-time",
        "0.1",
        "--concurrency",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["duration_s"] >= 0.3
    assert data["warmup_s"] >= 0.1
    assert data["concurrency"] == 3
    assert data["iterations"] > 3


@pytest.mark.parametrize("args", [["-n", "0"], ["--duration", "0"], ["--concurrency", "0"]])
def test_bench_rejects_zero(runner: CliRunner, mlp: Path, args: list[str]) -> None:
    result = invoke(runner, "bench", str(mlp), "--dim", "batch=1", *args)
    assert result.exit_code == 2
    one_line_error(result)


# -- compare -----------------------------------------------------------------------------------


def test_compare_same_engine_passes(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    report = tmp_path / "compare.json"
    result = invoke(
        runner,
        "compare",
        str(mlp),
        "--engines",
        "onnxruntime:cpu,onnxrt:cpu",
        "--per-layer",
        "--dim",
        "batch=2",
        "--json-out",
        str(report),
    )
    assert result.exit_code == 0, result.output
    assert "pass" in result.stdout
    assert "no intermediate tensor diverges" in result.stdout
    assert json.loads(report.read_text())["outputs"][0]["max_abs"] == 0.0


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ("onnxruntime:cpu,onnxruntime:cpu", "is given twice"),
        ("onnxruntime:cpu", "at least two"),
    ],
)
def test_compare_needs_two_different_targets(
    runner: CliRunner, mlp: Path, targets: str, message: str
) -> None:
    result = invoke(runner, "compare", str(mlp), "--engines", targets, "--dim", "batch=1")
    assert result.exit_code == 2
    assert message in one_line_error(result)


def test_compare_reports_targets_that_cannot_run(runner: CliRunner, mlp: Path) -> None:
    result = invoke(
        runner,
        "compare",
        str(mlp),
        "--engines",
        "onnxruntime:cpu,tensorrt:cuda",
        "--dim",
        "batch=1",
    )
    assert result.exit_code == 1
    assert "tensorrt:cuda" in result.stdout
    assert "EngineNotInstalledError" in result.stdout


def test_compare_fails_on_nan_unless_allowed(
    runner: CliRunner, tmp_path: Path, build_model: Any
) -> None:
    model = build_model(
        tmp_path / "log.onnx",
        [helper.make_node("Log", ["x"], ["y"], name="log")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    x = npy(tmp_path, "x.npy", np.array([-1.0, 0.0, 1.0, 2.0], np.float32))  # NaN, -inf
    args = ["compare", str(model), "--engines", "onnxruntime:cpu,ort:cpu", "--input", f"x={x}"]
    failed = invoke(runner, *args, "--json")
    assert failed.exit_code == 1
    (comparison,) = json.loads(failed.stdout)["outputs"]
    assert comparison["passed"] is False
    assert comparison["nonfinite"] == comparison["reference_nonfinite"] == 2
    assert "NaN/Inf: 2 in ort:cpu, 2 in the reference" in comparison["note"]
    allowed = invoke(runner, *args, "--allow-nonfinite")
    assert allowed.exit_code == 0, allowed.output


# -- inspect -----------------------------------------------------------------------------------


def test_inspect_plain_and_json(runner: CliRunner, mlp: Path) -> None:
    result = invoke(runner, "inspect", str(mlp))
    assert result.exit_code == 0, result.output
    assert "input   input   float32  [batch, 4]" in result.stdout
    assert "opsets ai.onnx 17" in result.stdout
    data = json.loads(invoke(runner, "inspect", str(mlp), "--json").stdout)
    assert data["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["batch", 4]}]
    assert data["ops"] == {"MatMul": 1, "Add": 1, "Relu": 1}
    assert data["initializers"] == 2
    assert data["initializer_bytes"] == (4 * 3 + 3) * 4


def test_inspect_external_data_and_subgraphs(runner: CliRunner, tmp_path: Path) -> None:
    then = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [256])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["w"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [256])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "branchy",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
        [onnx.numpy_helper.from_array(np.ones(256, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "external.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0
    )
    data = json.loads(invoke(runner, "inspect", str(path), "--json").stdout)
    assert data["subgraphs"] == 2
    assert data["ops"] == {"If": 1, "Identity": 1, "Neg": 1}
    assert data["external_data"] == [
        {"location": "w.bin", "tensors": 1, "bytes": 1024, "present": True}
    ]
    (tmp_path / "w.bin").unlink()
    assert "MISSING" in invoke(runner, "inspect", str(path)).stdout


def test_inspect_of_a_non_model_fails(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00garbage")
    result = invoke(runner, "inspect", str(bad))
    assert result.exit_code == 2
    assert "InvalidModelError" in one_line_error(result)


# -- cache -------------------------------------------------------------------------------------


def test_cache_list_explain_clear(runner: CliRunner, mlp: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    env = {"XPURUNTIME_CACHE_DIR": str(folder)}
    first = invoke(runner, "cache", "explain", str(mlp), "--device", "cpu", env=env)
    assert first.exit_code == 0, first.output
    assert f"cache folder: {folder} ($XPURUNTIME_CACHE_DIR)" in first.stdout
    assert "onnxruntime-optimized-model: miss" in first.stdout
    again = invoke(runner, "cache", "explain", str(mlp), "--device", "cpu", "--json", env=env)
    info = json.loads(again.stdout)
    assert info["lookups"]["onnxruntime-optimized-model"]["hit"] is True
    assert info["entries"] == 1
    listed = json.loads(invoke(runner, "cache", "list", "--json", env=env).stdout)
    (entry,) = listed["entries"]
    assert entry["kind"] == "onnxruntime-optimized-model"
    assert entry["bytes"] > 0
    assert "1 entries" in invoke(runner, "cache", "list", env=env).stdout
    cleared = invoke(runner, "cache", "clear", "--dir", str(folder))
    assert cleared.exit_code == 0
    assert cleared.stdout.startswith("removed 1 entries")
    assert json.loads(invoke(runner, "cache", "list", "--json", env=env).stdout)["entries"] == []


def test_run_with_an_unusable_cache_dir_follows_the_fallback(
    runner: CliRunner, mlp: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("x")
    args = ["run", str(mlp), "--dim", "batch=1", "--cache-dir", str(blocked)]
    failed = invoke(runner, *args, "--fallback", "error")
    assert failed.exit_code == 1
    assert "cannot hold new entries" in one_line_error(failed)
    warned = invoke(runner, *args)
    assert warned.exit_code == 0, warned.output
    assert "warning: FallbackWarning: cache onnxruntime-optimized-model" in warned.stderr


# -- demo and the command reference --------------------------------------------------------------


def test_demo_json(runner: CliRunner) -> None:
    result = invoke(runner, "demo", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["predictions"]) == 4
    assert data["record"]["policy_sources"]["execution.device"] == "command default"


def test_policy_group_is_mounted(runner: CliRunner) -> None:
    assert invoke(runner, "policy", "--help").exit_code == 0


def test_cli_reference_page_is_current() -> None:
    from xpuruntime.inference.cli.reference import render

    page = Path(__file__).resolve().parents[3] / "docs" / "reference" / "cli.md"
    assert page.read_text() == render(), (
        "docs/reference/cli.md is stale: python -m xpuruntime.inference.cli.reference > "
        "docs/reference/cli.md"
    )
