"""Fixtures shared by the core tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import xpuruntime.runtime as rt

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(autouse=True)
def _clean_dispatcher() -> None:
    """Each test starts with an empty decision log and resolution cache."""
    rt.dispatcher.clear()


@pytest.fixture
def core_script() -> Callable[[str], ModuleType]:
    """Loads ``scripts/<name>.py`` of this package as a module (the scripts are not in the
    installed package; registered in ``sys.modules``, where a script's dataclasses look
    their module up)."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    return load
