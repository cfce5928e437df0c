"""The `import xpuruntime as xrt` facade: lazy names, install hints, no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

import xpuruntime as xrt


def test_seed_names_resolve_to_their_members() -> None:
    from xpuruntime.policies import ExecutionPolicy, KernelPolicy
    from xpuruntime.runtime import errors

    assert xrt.KernelPolicy is KernelPolicy
    assert xrt.ExecutionPolicy is ExecutionPolicy
    assert xrt.UnsupportedOperationError is errors.UnsupportedOperationError
    assert issubclass(xrt.OutOfMemoryError, xrt.XpuRuntimeError)
    assert issubclass(xrt.PolicyError, xrt.XpuRuntimeError)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'InferenceSesion'"):
        _ = xrt.InferenceSesion  # type: ignore[attr-defined]


def test_dir_lists_the_public_api() -> None:
    names = dir(xrt)
    for name in ("InferenceSession", "KernelPolicy", "get_all_devices", "Device"):
        assert name in names


def test_get_all_devices_includes_the_cpu() -> None:
    devices = xrt.get_all_devices()
    assert any(getattr(d, "kind", None) == "cpu" for d in devices), devices


def test_import_pulls_in_no_backend() -> None:
    code = (
        "import sys, xpuruntime as x; x.KernelPolicy; x.ExecutionPolicy; x.InferenceSession;"
        "print(sorted(m for m in ('torch','onnxruntime','openvino','tensorrt') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
