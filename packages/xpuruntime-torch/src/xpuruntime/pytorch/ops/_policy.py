"""Shared helpers of the custom ops: which kernel the policy asks for, and recording it."""

from __future__ import annotations

import torch

from xpuruntime.policies import KernelPolicy
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import is_compiling

__all__ = ["describe", "requested_kernel"]


# op -> (the policy it was read from, (kernel, mode)): ops ask on every call.
_requested: dict[str, tuple[object, tuple[str, str]]] = {}


def requested_kernel(op: str) -> tuple[str, str]:
    """(kernel, mode) the policy in effect asks for ``op``; ("auto", "auto") when none.

    Read once per applied policy (the policy as it was applied: set a new one to change it).
    """
    kernel_policy = policy.get_kernel_policy()
    if is_compiling():  # dynamo traces the plain reads, not the cache's bookkeeping
        return _read(kernel_policy, op)
    cached = _requested.get(op)
    if cached is not None and cached[0] is kernel_policy:
        return cached[1]
    answer = _read(kernel_policy, op)
    _requested[op] = (kernel_policy, answer)
    return answer


def _read(kernel_policy: KernelPolicy | None, op: str) -> tuple[str, str]:
    if kernel_policy is None:
        return "auto", "auto"
    kernel = kernel_policy.get(op)
    if kernel is None or kernel in ("auto", "aten"):
        return "auto", "auto"
    return kernel, kernel_policy.mode(op) or "pin"


def describe(tensor: torch.Tensor) -> dict[str, str]:
    """The shape/dtype/device keywords of a decision record for ``tensor``."""
    return {
        "shape": "x".join(str(size) for size in tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "device": str(tensor.device),
    }
