"""Shared helpers: policy files written into tmp_path, in every format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

WriteFile = Callable[[str, str], Path]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    """``write("name.yaml", text)`` -> the path of a file holding ``text``."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture(autouse=True)
def _no_policy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start without XPURUNTIME_POLICY_* variables from the calling shell."""
    import os

    for name in list(os.environ):
        if name.startswith("XPURUNTIME_POLICY_"):
            monkeypatch.delenv(name)
