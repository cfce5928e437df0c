"""The xpuruntime-policy CLI through click's test runner: output and exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from xpuruntime.policies import ExecutionPolicy, KernelPolicy, PolicyDocument, load_policy
from xpuruntime.policies.cli import policy

WriteFile = Callable[[str, str], Path]

GOOD = """\
schema_version: 1
kernel:
  ops:
    matmul: cublasLt
execution:
  precision: fp16
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def good(write: WriteFile) -> Path:
    return write("good.yaml", GOOD)


def test_validate_ok(runner: CliRunner, good: Path) -> None:
    result = runner.invoke(policy, ["validate", str(good)])
    assert result.exit_code == 0
    assert result.stdout == f"ok: {good} (sha256 {load_policy(good).content_hash()})\n"


def test_validate_reports_each_bad_file(runner: CliRunner, good: Path, write: WriteFile) -> None:
    bad = write("bad.json", '{"schema_version": 1, "kernel": {"ops": {"matmul": "cublaslt"}}}')
    broken = write("broken.toml", "schema_version = \n")
    result = runner.invoke(policy, ["validate", str(good), str(bad), str(broken)])
    assert result.exit_code == 1
    assert result.stdout.startswith(f"ok: {good}")
    errors = result.stderr.splitlines()
    assert errors[0].startswith(f"error: {bad}: kernel.ops.matmul: unknown kernel 'cublaslt'")
    assert "Did you mean 'cublasLt'?" in errors[0]
    assert errors[1].startswith(f"error: {broken}:1:18: malformed TOML: Invalid value")
    assert "Traceback" not in result.output


def test_show_normalizes(runner: CliRunner, good: Path) -> None:
    result = runner.invoke(policy, ["show", str(good), "--to", "json"])
    assert result.exit_code == 0
    shown = json.loads(result.stdout)
    assert shown["execution"]["engines"] == ["tensorrt", "onnxruntime", "openvino", "qnn"]
    assert shown["kernel"] == {"strategy": "first_supported", "ops": {"matmul": "cublasLt"}}
    same_format = runner.invoke(policy, ["show", str(good)])
    assert same_format.stdout.startswith("schema_version: 1\nkernel:\n  strategy: first_supported")


def test_show_with_environment(
    runner: CliRunner, good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_PRECISION", "bf16")
    with_env = runner.invoke(policy, ["show", str(good), "--env", "--to", "json"])
    assert json.loads(with_env.stdout)["execution"]["precision"] == "bf16"
    without = runner.invoke(policy, ["show", str(good), "--to", "json"])
    assert json.loads(without.stdout)["execution"]["precision"] == "fp16"


def test_diff(runner: CliRunner, good: Path, write: WriteFile) -> None:
    other = write(
        "other.toml",
        'schema_version = 1\n[kernel.ops]\nmatmul = "cublas"\n[execution]\nprecision = "fp16"\n',
    )
    result = runner.invoke(policy, ["diff", str(good), str(other)])
    assert result.exit_code == 1
    assert result.stdout == '~ kernel.ops.matmul: "cublasLt" -> "cublas"\n'
    same = PolicyDocument.load(good).save(good.with_suffix(".json"))
    result = runner.invoke(policy, ["diff", str(good), str(same)])
    assert (result.exit_code, result.stdout) == (0, "no differences\n")


def test_diff_of_an_invalid_file(runner: CliRunner, good: Path, write: WriteFile) -> None:
    bad = write("bad.yaml", "schema_version: 3\n")
    result = runner.invoke(policy, ["diff", str(good), str(bad)])
    # 2, not 1: nothing was compared, which CI must tell from "the policies differ"
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad}: schema_version: schema_version 3")
    not_a_policy = write("model.onnx", "hello")
    result = runner.invoke(policy, ["diff", str(good), str(not_a_policy)])
    assert result.exit_code == 2
    assert "cannot tell the format" in result.stderr
    assert not_a_policy.read_text() == "hello"


def test_hash(runner: CliRunner, good: Path, tmp_path: Path) -> None:
    as_toml = load_policy(good).save(tmp_path / "same.toml")
    hashes = {runner.invoke(policy, ["hash", str(path)]).stdout for path in (good, as_toml)}
    assert hashes == {load_policy(good).content_hash() + "\n"}


def test_schema(runner: CliRunner, tmp_path: Path) -> None:
    printed = runner.invoke(policy, ["schema"])
    assert printed.exit_code == 0
    assert json.loads(printed.stdout)["$ref"] == "#/$defs/PolicyFile"
    target = tmp_path / "policy.schema.json"
    written = runner.invoke(policy, ["schema", "-o", str(target)])
    assert written.stdout == f"wrote {target}\n"
    assert json.loads(target.read_text()) == json.loads(printed.stdout)


def test_schema_never_writes_over_a_file_that_is_not_json(
    runner: CliRunner, tmp_path: Path
) -> None:
    model = tmp_path / "demo.onnx"
    model.write_bytes(b"\x08\x07onnx")
    refused = runner.invoke(policy, ["schema", "-o", str(model)])
    assert refused.exit_code == 2
    assert "does not hold JSON" in refused.stderr
    assert model.read_bytes() == b"\x08\x07onnx"
    missing = runner.invoke(policy, ["schema", "-o", str(tmp_path / "no" / "s.json")])
    assert missing.exit_code == 2
    assert "does not exist" in missing.stderr


def test_kernels(runner: CliRunner) -> None:
    result = runner.invoke(policy, ["kernels", "matmul"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "matmul:"
    # Engines whose package is installed list their own table; the others (marked *) the
    # built-in declaration, and a footnote says why.
    assert lines[1].startswith("  cublas       devices=cuda      engines=onnxruntime")
    assert "torch" in lines[1].split("prefer-only=")[0]
    for engine in ("onnxruntime", "torch", "xpuruntime"):
        if f"{engine}*(" in lines[1]:
            assert any(line.startswith(f"* {engine}: built-in list") for line in lines)
    unknown = runner.invoke(policy, ["kernels", "matmull"])
    assert unknown.exit_code == 2  # an unknown name is a usage error
    assert "Did you mean 'matmul'?" in unknown.stderr


@pytest.mark.parametrize(
    "arguments",
    [
        [],
        ["validate"],
        ["validate", "missing.yaml"],
        ["diff", "only-one.yaml"],
        ["show", "x.yaml", "--to", "xml"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(runner: CliRunner, arguments: list[str]) -> None:
    result = runner.invoke(policy, arguments)
    assert result.exit_code == 2 if arguments else result.exit_code in (0, 2)
    if arguments:  # one line, as xpuruntime's errors, not click's three-line usage block
        assert result.output.count("\n") == 1
        assert result.output.startswith("error: ")
        assert "Usage:" not in result.output


def test_saved_policies_validate(runner: CliRunner, tmp_path: Path) -> None:
    path = ExecutionPolicy(precision="bf16", kernel_policy=KernelPolicy(conv="cudnn")).save(
        tmp_path / "exec.toml"
    )
    assert runner.invoke(policy, ["validate", str(path)]).exit_code == 0


def test_json_output_of_every_command(runner: CliRunner, good: Path, write: WriteFile) -> None:
    other = write("other.yaml", GOOD.replace("fp16", "bf16"))
    digest = load_policy(good).content_hash()
    validated = runner.invoke(policy, ["validate", str(good), "--json"])
    assert validated.exit_code == 0
    assert json.loads(validated.stdout) == {
        "files": [{"file": str(good), "valid": True, "sha256": digest}]
    }
    hashed = runner.invoke(policy, ["hash", str(good), "--json-out", "-"])
    assert json.loads(hashed.stdout) == {"file": str(good), "sha256": digest}
    shown = json.loads(runner.invoke(policy, ["show", str(good), "--json"]).stdout)
    assert shown["execution"]["precision"] == "fp16"
    changed = runner.invoke(policy, ["diff", str(good), str(other), "--json"])
    assert changed.exit_code == 1
    assert json.loads(changed.stdout)["changes"] == [
        {"path": "execution.precision", "kind": "changed", "old": "fp16", "new": "bf16"}
    ]
    listed = json.loads(runner.invoke(policy, ["kernels", "matmul", "--json"]).stdout)
    assert "cublasLt" in [k["name"] for k in listed["ops"]["matmul"]]
    assert "$schema" in json.loads(runner.invoke(policy, ["schema", "--json"]).stdout)


def test_json_to_a_file(runner: CliRunner, good: Path, tmp_path: Path) -> None:
    target = tmp_path / "hash.json"
    result = runner.invoke(policy, ["hash", str(good), "--json-out", str(target)])
    assert result.exit_code == 0
    assert result.stdout.strip() == load_policy(good).content_hash()
    assert json.loads(target.read_text())["sha256"] == result.stdout.strip()


def test_kernels_columns_align_for_every_name(runner: CliRunner) -> None:
    lines = runner.invoke(policy, ["kernels"]).stdout.splitlines()
    rows = [line for line in lines if line.startswith("  ")]
    assert rows
    assert len({line.index(" devices=") for line in rows}) == 1
    assert len({line.index(" engines=") for line in rows}) == 1


def test_an_option_given_twice_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    result = runner.invoke(policy, ["schema", "-o", str(first), "--output", str(second)])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --output is given twice (also as -o); it takes one value "
        "(see 'policy schema --help')\n"
    )
    assert not first.exists()
    assert not second.exists()
