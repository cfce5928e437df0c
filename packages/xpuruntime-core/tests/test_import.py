"""Import contract: pure-Python submodules without the native module, nothing heavy loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

import xpuruntime.runtime as rt


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_contract_submodules_import_without_the_native_module() -> None:
    out = _run(
        "import sys\n"
        "import xpuruntime.runtime\n"
        "from xpuruntime.runtime import errors, record, engines, abi\n"
        "print('xpuruntime.runtime._core' in sys.modules)"
    )
    assert out == "False"


def test_runtime_does_not_import_heavy_frameworks() -> None:
    out = _run(
        "import sys\n"
        "import xpuruntime.runtime as rt, xpuruntime.ops\n"
        "rt.get_all_devices(); rt.environment_fingerprint()\n"
        "print(sorted(m for m in ('torch', 'onnxruntime', 'openvino', 'tensorrt', 'cupy') if m in sys.modules))"
    )
    assert out == "[]"


def test_abi_version_and_require_abi() -> None:
    from xpuruntime.runtime.abi import core_abi_version, require_abi

    assert rt.ABI_VERSION == 1 == core_abi_version()
    require_abi(1, "tests")
    with pytest.raises(ImportError, match=r"needs xpuruntime-core ABI 2.*provides ABI 1"):
        require_abi(2, "xpuruntime-future 9.0")


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = getattr(rt, "no_such_thing")  # noqa: B009 - the lazy __getattr__ under test
