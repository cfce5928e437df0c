"""The lazily resolved names (PEP 562) of the packages with a name table: the table that
resolves them at run time and the TYPE_CHECKING imports that type checkers read say the same,
and every public name resolves."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]
# package -> (its __init__.py, the name of its table)
TABLES = {
    "xpuruntime": (PACKAGES / "xpuruntime/src/xpuruntime/__init__.py", "_LAZY_ATTRIBUTES"),
    "xpuruntime.policies": (
        PACKAGES / "xpuruntime-policies/src/xpuruntime/policies/__init__.py",
        "_LAZY",
    ),
    "xpuruntime.runtime": (
        PACKAGES / "xpuruntime-core/src/xpuruntime/runtime/__init__.py",
        "_LAZY",
    ),
}


def _table(tree: ast.Module, name: str) -> dict[str, str]:
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets: list[ast.expr] = [node.target]
            value = node.value
        elif isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            table = ast.literal_eval(value)
            assert isinstance(table, dict)
            return table
    raise AssertionError(f"no table {name}")


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in ast.walk(node):
                if isinstance(item, ast.ImportFrom) and item.module != "typing":
                    for alias in item.names:
                        found[alias.asname or alias.name] = str(item.module)
    return found


@pytest.mark.parametrize("package", sorted(TABLES))
def test_the_table_and_the_type_checking_imports_agree(package: str) -> None:
    path, name = TABLES[package]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    table = {
        public: module if module.startswith("xpuruntime") else f"{package}.{module}"
        for public, module in _table(tree, name).items()
    }
    static = _type_checking_imports(tree)
    assert {k: static.get(k) for k in table} == table
    module = importlib.import_module(package)
    for public in [*table, *static]:
        assert public in module.__all__
        getattr(module, public)
