"""xpuruntime.inference: run ONNX models on ONNX Runtime (CPU, CUDA) or TensorRT under an
explicit policy, and get an execution record of what ran.

    from xpuruntime.inference import InferenceSession
    sess = InferenceSession("model.onnx", device="cuda:0", engine="onnxruntime")
    out = sess.run({"input": x})
    print(sess.explain())

Importing this package imports neither onnxruntime nor tensorrt; engines load their backend
when a session is created.
"""

from __future__ import annotations

from xpuruntime.runtime.abi import member_version

#: The native core ABI this package was written against.
CORE_ABI = 1
__version__ = member_version("xpuruntime-inference", CORE_ABI)

from xpuruntime.inference.cache import CacheKey, CacheLookup, ContentCache  # noqa: E402
from xpuruntime.inference.errors import (  # noqa: E402
    DeviceNotFoundError,
    EngineRunError,
    HostShapeComputeError,
    InputDtypeError,
    InputError,
    InputNameError,
    InputShapeError,
    InputShapeWarning,
    InvalidModelError,
    ModelNotFoundError,
)
from xpuruntime.inference.pool import SessionPool  # noqa: E402
from xpuruntime.inference.session import InferenceSession  # noqa: E402

__all__ = [
    "CORE_ABI",
    "CacheKey",
    "CacheLookup",
    "ContentCache",
    "DeviceNotFoundError",
    "EngineRunError",
    "HostShapeComputeError",
    "InferenceSession",
    "InputDtypeError",
    "InputError",
    "InputNameError",
    "InputShapeError",
    "InputShapeWarning",
    "InvalidModelError",
    "ModelNotFoundError",
    "SessionPool",
    "__version__",
]
