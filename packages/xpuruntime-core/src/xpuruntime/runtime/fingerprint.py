"""Environment fingerprint: what identifies the software and hardware a run used.

The dict holds the GPUs (name, compute capability, SMs, memory), the CUDA driver and runtime,
cuBLAS/cuBLASLt/cuDNN versions (when found), the Python, OS and the versions of the libraries
that decide results. Versions come from package metadata: nothing heavy is imported.
:func:`fingerprint_hash` is a SHA-256 over its canonical JSON.
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from xpuruntime.policies.lock import environment_key
from xpuruntime.runtime.native import core

__all__ = ["FINGERPRINT_PACKAGES", "environment_fingerprint", "fingerprint_hash"]

FINGERPRINT_PACKAGES = (
    "xpuruntime-core",
    "xpuruntime-policies",
    "xpuruntime-inference",
    "xpuruntime-torch",
    "xpuruntime-npu",
    "numpy",
    "torch",
    "triton",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-qnn",
    "openvino",
    "tensorrt",
    "tensorrt-cu12",
    "tensorrt-cu13",
    "cupy-cuda12x",
    "cupy-cuda13x",
)


def _version_text(encoded: int, *, thousands: bool = True) -> str | None:
    """CUDA encodes 12.4 as 12040; cuBLAS 12.4.5 as 120405 (thousands=False -> x.y.z)."""
    if encoded <= 0:
        return None
    if thousands:
        return f"{encoded // 1000}.{encoded % 1000 // 10}"
    return f"{encoded // 10000}.{encoded % 10000 // 100}.{encoded % 100}"


def _cudnn_version_text(encoded: int) -> str | None:
    """cuDNN 9 encodes 9.1.0 as 90100; cuDNN 8 encoded 8.9.7 as 8907."""
    if encoded <= 0:
        return None
    if encoded >= 10000:
        return _version_text(encoded, thousands=False)
    return f"{encoded // 1000}.{encoded % 1000 // 100}.{encoded % 100}"


def environment_fingerprint() -> dict[str, Any]:
    """The fingerprint dict (stable keys; absent components are None)."""
    native = core().native_environment()
    packages: dict[str, str] = {}
    for name in FINGERPRINT_PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            continue
    gpus = list(native["gpus"])
    return {
        "gpu": [g["name"] for g in gpus],
        "cc": [g["compute_capability"] for g in gpus],
        "gpus": gpus,
        "driver": _version_text(int(native["cuda_driver_version"])),
        "cuda_runtime": _version_text(int(native["cuda_runtime_version"])),
        "cublas": _version_text(int(native["cublas_version"]), thousands=False),
        "cublaslt": _version_text(int(native["cublaslt_version"]), thousands=False),
        "cudnn": _cudnn_version_text(int(native["cudnn_version"])),
        "core_build": {
            "cuda": bool(native["cuda_built"]),
            "abi": int(core().ABI_VERSION),
            "compiler": native["compiler"],
            "cuda_architectures": native["cuda_architectures"] or None,
        },
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "packages": packages,
    }


def fingerprint_hash(fp: dict[str, Any] | None = None) -> str:
    """Stable hex SHA-256 of ``fp`` (default: this environment's fingerprint); the key a
    lockfile stores the fingerprint under."""
    return environment_key(environment_fingerprint() if fp is None else fp)
