"""Check the import-linter contracts of ``pyproject.toml`` over the whole ``xpuruntime`` tree.

    python scripts/check_layers.py

``xpuruntime`` is one package spread over the workspace members (packages/*/src), which
import-linter's graph builder cannot follow (it reads one directory per top-level package).
This copies the members' sources into one temporary tree (Python files only: nothing is
imported or built) and runs ``lint-imports`` on it. Exits with lint-imports' status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def merged_tree(target: Path) -> Path:
    """``target``/xpuruntime holding every member's part of the package; returns it."""
    package = target / "xpuruntime"
    for source in sorted(ROOT.glob("packages/*/src/xpuruntime")):
        shutil.copytree(
            source,
            package,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "data", "*.onnx"),
        )
    return package


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="xpuruntime-layers-") as folder:
        merged_tree(Path(folder))
        environ = {**os.environ, "PYTHONPATH": folder}
        lint = Path(sys.executable).with_name("lint-imports")
        command = [str(lint) if lint.exists() else "lint-imports", "pyproject.toml"]
        return subprocess.run(command, cwd=ROOT, env=environ, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
