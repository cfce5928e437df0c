"""The README's install section says what works before a release and names every extra."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
META = tomllib.loads((ROOT / "packages" / "xpuruntime" / "pyproject.toml").read_text())


def test_every_extra_of_the_meta_package_is_in_the_readme() -> None:
    extras = META["project"]["optional-dependencies"]
    missing = [name for name in extras if f"xpuruntime[{name}]" not in README]
    assert missing == []


def test_the_serve_extra_installs_ray_serve_through_the_inference_member() -> None:
    (requirement,) = META["project"]["optional-dependencies"]["serve"]
    assert re.fullmatch(r"xpuruntime-inference\[serve\]==[\d.]+", requirement)
    inference = tomllib.loads(
        (ROOT / "packages" / "xpuruntime-inference" / "pyproject.toml").read_text()
    )
    assert any(
        r.startswith("ray[serve]") for r in inference["project"]["optional-dependencies"]["serve"]
    )


def test_installing_before_a_release_is_described() -> None:
    assert "python3 -m uv sync --package xpuruntime --extra cpu" in README  # from a clone
    assert 'pip install --find-links dist "xpuruntime[cpu]"' in README  # from built wheels
    assert "download.pytorch.org/whl/cpu" in README  # torch on a CPU-only machine
    assert "--torch-backend cpu" in README


def test_the_set_up_commands_are_unchanged() -> None:
    """tests/test_packaging.py runs the first; CI runs the second."""
    assert (
        'python3 -m pip install -q "uv>=0.9" && python3 -m uv run --package xpuruntime '
        "--extra cpu xpuruntime demo"
    ) in README
    assert 'python3 -m pip install -q "uv>=0.9" "nox>=2025.2.9" && python3 -m nox' in README
