from __future__ import annotations

import platform

import pytest

import xpuruntime.runtime as rt


def test_fingerprint_lists_environment_and_hash_is_stable() -> None:
    fp = rt.environment_fingerprint()
    assert fp["python"] == platform.python_version()
    assert fp["core_build"]["abi"] == 1
    assert fp["packages"]["xpuruntime-core"]
    assert len(fp["gpu"]) == rt.get_device_count()
    if not fp["core_build"]["cuda"]:
        assert fp["cuda_runtime"] is None
        assert fp["cublas"] is None
    h = rt.fingerprint_hash(fp)
    assert h == rt.fingerprint_hash(dict(reversed(list(fp.items()))))  # key order irrelevant
    assert len(h) == 64
    assert int(h, 16) >= 0
    assert rt.fingerprint_hash({**fp, "python": "0.0"}) != h


def test_engine_registry_register_find_and_hint() -> None:
    reg = rt.engine_registry
    reg.register("test-ort", {"devices": ["cpu", "cuda"], "precisions": ["fp32", "fp16"]})
    reg.register("test-ov", {"devices": "npu", "precisions": ["int8"]})
    try:
        assert "test-ort" in reg.find(devices="cuda")
        assert reg.find(devices="npu", precisions="int8") == ["test-ov"]
        assert reg.get("test-ov")["capabilities"] == {"devices": ["npu"], "precisions": ["int8"]}
        with pytest.raises(rt.InvalidArgumentError, match="did you mean 'test-ort'"):
            reg.get("test-or")
        with pytest.raises(rt.InvalidArgumentError, match="must be a string or a list of strings"):
            reg.register("bad", {"devices": [1, 2]})  # type: ignore[list-item]
    finally:
        assert reg.unregister("test-ort")
        assert reg.unregister("test-ov")
