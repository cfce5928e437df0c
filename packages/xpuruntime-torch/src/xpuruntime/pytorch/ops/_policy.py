"""Shared helpers of the custom ops: which kernel the policy asks for, and recording it."""

from __future__ import annotations

import torch

from xpuruntime.pytorch import policy

__all__ = ["describe", "requested_kernel"]


def requested_kernel(op: str) -> tuple[str, str]:
    """(kernel, mode) the policy in effect asks for ``op``; ("auto", "auto") when none."""
    kernel_policy = policy.get_kernel_policy()
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
