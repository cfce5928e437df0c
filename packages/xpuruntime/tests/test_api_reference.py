"""The API reference (docs/api/*.md, rendered by mkdocstrings) covers the whole public API:
every name in ``__all__`` of every public module is on a reference page.

A page covers a name when a ``::: module`` directive lists it under ``members:`` (rendered
even without a docstring: the pages set ``show_if_no_docstring``), when a directive names
the object itself (a submodule, or a function that shares its name with its module, such as
``xpuruntime.pytorch.autocast.autocast``), or when a heading carries its id
(``{#xpuruntime.runtime.ABI_VERSION}``, for values only the native module knows).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
#: The public modules; each must have a page and every name of its __all__ documented.
PUBLIC = (
    "xpuruntime.policies",
    "xpuruntime.runtime",
    "xpuruntime.ops",
    "xpuruntime.inference",
    "xpuruntime.npu",
    "xpuruntime.pytorch",
)


def _directives() -> dict[str, set[str]]:
    """``::: target`` -> the names its ``members:`` option lists (empty when none)."""
    found: dict[str, set[str]] = {}
    current: set[str] | None = None
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("::: "):
                current = found.setdefault(line[4:].strip(), set())
            elif current is not None and re.match(r"^\s+- \w+$", line):
                current.add(line.split("- ")[1])
            elif not line.startswith(" "):
                current = None
    return found


def _heading_ids() -> set[str]:
    text = "".join(page.read_text(encoding="utf-8") for page in PAGES)
    return set(re.findall(r"\{#([\w.]+)\}", text))


def _documented_modules() -> list[str]:
    modules = []
    for target in _directives():
        try:
            module = importlib.import_module(target)
        except ImportError:
            continue
        if hasattr(module, "__all__"):
            modules.append(target)
    return sorted(set(modules) | set(PUBLIC))


def _covered(module: ModuleType, name: str) -> bool:
    directives = _directives()
    obj = getattr(module, name)
    names = {f"{module.__name__}.{name}"}
    if inspect.ismodule(obj):
        names.add(obj.__name__)
    elif hasattr(obj, "__module__") and hasattr(obj, "__qualname__"):
        names.add(f"{obj.__module__}.{obj.__qualname__}")
    return (
        name in directives.get(module.__name__, set())
        or bool(names & set(directives))
        or bool(names & _heading_ids())
    )


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # xpuruntime.pytorch without torch, for example
        pytest.skip(f"{name} cannot be imported here: {exc}")


@pytest.mark.parametrize("module_name", _documented_modules())
def test_every_public_name_is_on_a_reference_page(module_name: str) -> None:
    module = _import(module_name)
    assert module_name in _directives(), f"no '::: {module_name}' on any docs/api page"
    public = [n for n in module.__all__ if not n.startswith("__")]
    missing = [n for n in public if not _covered(module, n)]
    assert missing == [], f"{module_name}: not on the reference pages: {missing}"


def test_the_facade_names_are_documented_where_they_live() -> None:
    """``import xpuruntime as xrt`` re-exports names of the members: each is documented in
    the member module that holds it (or, for the facade's own function, on its page)."""
    import xpuruntime

    members = [_import(name) for name in PUBLIC if name != "xpuruntime.pytorch"]
    missing = []
    for name in (n for n in xpuruntime.__all__ if not n.startswith("__")):
        obj = getattr(xpuruntime, name)
        homes = [m for m in members if getattr(m, name, None) is obj]
        home = sys.modules.get(getattr(obj, "__module__", "") or "")
        if home is not None and home is not xpuruntime:
            homes.append(home)
        if not any(_covered(m, name) for m in homes) and f"xpuruntime.{name}" not in _heading_ids():
            missing.append(name)
    assert missing == []


def test_the_issue_names_are_documented() -> None:
    """The names the API reference used to leave out."""
    directives = _directives()
    assert "autocast" not in directives["xpuruntime.pytorch"]  # the module, not the function
    for target in (
        "xpuruntime.pytorch.autocast.autocast",
        "xpuruntime.pytorch.explain.explain",
        "xpuruntime.pytorch.ops",
        "xpuruntime.ops",
        "xpuruntime.npu.quantize",
    ):
        assert target in directives, target
    assert {"ExecutionRecord", "FallbackWarning"} <= directives["xpuruntime.runtime.record"]
    assert "BestPerformance" in directives["xpuruntime.policies"]
