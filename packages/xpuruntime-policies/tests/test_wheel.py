"""The built wheel, installed alone into a fresh virtual environment, runs the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xpuruntime.policies.execution_policy import SECTION_FIELDS

PACKAGE = Path(__file__).resolve().parents[1]
UV = shutil.which("uv")

GOOD = """\
schema_version: 1
kernel:
  ops:
    matmul: cublasLt
    attention: {kernel: flash_v2, mode: prefer}
execution:
  precision: fp16
  device: cuda:0
"""
BAD = '{"schema_version": 1, "execution": {"precison": "fp16"}}\n'
CHANGED = 'schema_version = 1\n[kernel.ops]\nmatmul = "cublas"\n[execution]\nprecision = "fp16"\ndevice = "cuda:0"\n'


def _run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "VIRTUAL_ENV" and not k.startswith("XPURUNTIME_")
    }
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.skipif(UV is None, reason="uv is not on PATH (it builds the wheel and the venv)")
def test_wheel_alone_in_a_fresh_venv(tmp_path: Path) -> None:
    assert UV is not None
    built = _run(UV, "build", "--wheel", PACKAGE, "-o", tmp_path / "dist")
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("xpuruntime_policies-*.whl")

    venv = tmp_path / "venv"
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    created = _run(UV, "venv", venv, "-p", python_version)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    installed = _run(UV, "pip", "install", "--python", python, wheel)
    assert installed.returncode == 0, installed.stderr

    absent = _run(
        python,
        "-c",
        "import importlib.util as u; import xpuruntime.policies as p; import xpuruntime;"
        "print([m for m in ('numpy', 'torch', 'onnxruntime', 'openvino', 'tensorrt')"
        " if u.find_spec(m)]); print(xpuruntime.__file__); print(p.KernelPolicy(matmul='cublas'))",
    )
    assert absent.returncode == 0, absent.stderr
    assert absent.stdout.splitlines() == ["[]", "None", "KernelPolicy(matmul='cublas')"]

    cli = venv / "bin" / "xpuruntime-policy"
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.json").write_text(BAD)
    (tmp_path / "changed.toml").write_text(CHANGED)

    good = _run(cli, "validate", "good.yaml", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("ok: good.yaml (sha256 ")

    bad = _run(cli, "validate", "bad.json", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr == (
        "error: bad.json: execution: unknown setting 'precison'. Valid choices: "
        + ", ".join(sorted(SECTION_FIELDS))
        + ". Did you mean 'precision'?\n"
    )

    changed = _run(cli, "diff", "good.yaml", "changed.toml", cwd=tmp_path)
    assert changed.returncode == 1, changed.stderr
    assert changed.stdout.splitlines() == [
        '- kernel.ops.attention.kernel: "flash_v2"',
        '- kernel.ops.attention.mode: "prefer"',
        '~ kernel.ops.matmul: "cublasLt" -> "cublas"',
    ]
    same = _run(cli, "diff", "good.yaml", "good.yaml", cwd=tmp_path)
    assert (same.returncode, same.stdout) == (0, "no differences\n")

    usage = _run(cli, "diff", "good.yaml", cwd=tmp_path)
    assert usage.returncode == 2
    assert usage.stderr.startswith("error: Missing argument")  # one line, as every CLI error
    assert "--help" in usage.stderr
