"""``xpuruntime-policy``: validate lists every error of a file; --json-out never writes over
an input."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from xpuruntime.policies.cli import policy

BAD = """\
schema_version: 1
kernel:
  ops:
    matmul: cublaslt
execution:
  device: gpu
  precision: fp33
  num_threads: -1
  memory:
    pool: maybe
"""


def test_every_error_of_a_file_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = CliRunner().invoke(policy, ["validate", str(path)])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    located = sorted(line.split(": ")[2] for line in errors)
    assert located == [
        "execution.device",
        "execution.memory.pool",
        "execution.num_threads",
        "execution.precision",
        "kernel.ops.matmul",
    ]
    listed = json.loads(CliRunner().invoke(policy, ["validate", str(path), "--json"]).stdout)
    assert len(listed["files"][0]["errors"]) == 5
    assert listed["files"][0]["error"] == listed["files"][0]["errors"][0]


def test_settings_wrong_only_together_are_one_error(tmp_path: Path) -> None:
    """lock without lock_file is one conflict; taking settings out one by one finds no more."""
    path = tmp_path / "conflict.yaml"
    path.write_text("schema_version: 1\nexecution:\n  lock: replay\n  precision: fp16\n")
    result = CliRunner().invoke(policy, ["validate", str(path)])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "lock_file" in errors[0]


def test_a_file_that_does_not_parse_has_one_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema_version": 1, "execution": {')
    result = CliRunner().invoke(policy, ["validate", str(path)])
    assert result.exit_code == 1
    assert len([x for x in result.stderr.splitlines() if x.startswith("error:")]) == 1


def test_json_out_never_writes_over_the_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("schema_version: 1\nexecution:\n  precision: fp16\n")
    before = path.read_text()
    for command in (["hash", str(path)], ["show", str(path)], ["validate", str(path)]):
        result = CliRunner().invoke(policy, [*command, "--json-out", str(path)])
        assert result.exit_code == 2, result.output
        assert "it is one of the command's inputs" in result.output
    assert path.read_text() == before
    written = tmp_path / "hash.json"
    assert (
        CliRunner().invoke(policy, ["hash", str(path), "--json-out", str(written)]).exit_code == 0
    )
    assert json.loads(written.read_text())["sha256"]
