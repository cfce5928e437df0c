"""Importing the package is light: no numpy, no YAML/TOML writer, no click, no engines."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
import types

import pytest

import xpuruntime.policies as policies

HEAVY = ("numpy", "torch", "onnxruntime", "openvino", "tensorrt", "yaml", "tomli_w", "click")


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return set(output.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import xpuruntime.policies",
        "from xpuruntime.policies import KernelPolicy, ExecutionPolicy, load_policy, diff",
        "from xpuruntime.policies import KernelPolicy, ExecutionPolicy\n"
        "ExecutionPolicy(device='cuda', kernel_policy=KernelPolicy(matmul='cublasLt'))",
    ],
)
def test_nothing_heavy_is_imported(statement: str) -> None:
    loaded = _modules_after(statement)
    assert not loaded & set(HEAVY)
    assert "importlib.metadata" not in loaded  # plugins are read only when needed


def test_bare_import_does_not_load_msgspec() -> None:
    assert "msgspec" not in _modules_after("import xpuruntime.policies")


def test_every_public_name_resolves_after_all_submodules_load() -> None:
    # A submodule named like a public function would shadow it once imported.
    for module in pkgutil.iter_modules(policies.__path__):
        importlib.import_module(f"{policies.__name__}.{module.name}")
    for name in policies.__all__:
        value = getattr(policies, name)
        assert not isinstance(value, types.ModuleType), name
    assert set(policies.__all__) <= set(dir(policies))
    assert policies.__version__ == importlib.metadata.version("xpuruntime-policies")
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        policies.nope  # noqa: B018
