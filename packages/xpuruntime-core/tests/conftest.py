"""Fixtures shared by the core tests."""

from __future__ import annotations

import pytest

import xpuruntime.runtime as rt


@pytest.fixture(autouse=True)
def _clean_dispatcher() -> None:
    """Each test starts with an empty decision log and resolution cache."""
    rt.dispatcher.clear()
