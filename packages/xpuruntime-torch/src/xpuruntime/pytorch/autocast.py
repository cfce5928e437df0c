"""Mixed precision for training: ``torch.autocast`` with the policy's precision as default.

``autocast(dtype=torch.float16)`` (seed 000) and ``autocast(fp16=True)`` (seed 004) both map
onto ``torch.autocast`` for the device type training runs on (CUDA when PyTorch has a GPU,
else CPU). Without ``dtype`` the execution policy's ``precision`` decides (``fp16`` /
``bf16``); without either, float16 on CUDA and bfloat16 on CPU (CPU autocast is bf16-first).
"""

from __future__ import annotations

import torch

from xpuruntime.policies import PolicyError
from xpuruntime.pytorch.policy import get_execution_policy

__all__ = ["autocast"]

_POLICY_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_DEVICE_TYPES = ("cuda", "cpu")


def _default_device_type() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolve_dtype(dtype: torch.dtype | None, fp16: bool | None, device_type: str) -> torch.dtype:
    if fp16 is not None and dtype is not None and (dtype == torch.float16) != fp16:
        raise PolicyError(
            f"autocast(dtype={dtype}, fp16={fp16}) contradict each other; pass one of them"
        )
    if dtype is not None:
        return dtype
    if fp16:
        return torch.float16
    execution = get_execution_policy()
    if execution is not None and execution.precision in _POLICY_DTYPES:
        return _POLICY_DTYPES[execution.precision]
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def autocast(
    dtype: torch.dtype | None = None,
    enabled: bool = True,
    cache_enabled: bool | None = None,
    *,
    fp16: bool | None = None,
    device_type: str | None = None,
) -> torch.autocast:
    """A ``torch.autocast`` context for the training device (usable as decorator too).

    ``fp16=True`` is the seed's shorthand for ``dtype=torch.float16``; ``fp16=False`` turns
    autocast off unless a ``dtype`` is given.
    """
    device = device_type or _default_device_type()
    if device not in _DEVICE_TYPES:
        raise PolicyError(
            f"autocast device_type must be one of {list(_DEVICE_TYPES)}, got {device!r}"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise PolicyError(
            "autocast(device_type='cuda') but PyTorch sees no CUDA device "
            f"(torch {torch.__version__}); use device_type='cpu' or leave it unset"
        )
    chosen = _resolve_dtype(dtype, fp16, device)
    on = enabled and not (fp16 is False and dtype is None)
    return torch.autocast(device_type=device, dtype=chosen, enabled=on, cache_enabled=cache_enabled)
