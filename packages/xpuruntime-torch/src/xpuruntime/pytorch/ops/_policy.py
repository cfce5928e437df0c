"""Shared helpers of the custom ops: which kernel the policy asks for, whether it can run on
the call's device, and recording what happened."""

from __future__ import annotations

from typing import TypedDict

import torch

from xpuruntime.pytorch import policy
from xpuruntime.pytorch.mapping import kernel_devices
from xpuruntime.pytorch.policy import requested_kernel
from xpuruntime.runtime.record import DecisionStatus

__all__ = ["describe", "fall_back", "note_call", "off_device_reason", "requested_kernel"]


def off_device_reason(op: str, kernel: str, tensor: torch.Tensor) -> str | None:
    """Why ``kernel`` cannot serve ``op`` on ``tensor``'s device (PyTorch's mapping says
    where each kernel runs); None when it can run there."""
    devices = kernel_devices(op, kernel)
    if devices is None or tensor.device.type in devices:
        return None
    return f"{kernel!r} runs on {'/'.join(sorted(devices))} but this call's tensors are on {tensor.device}"


def fall_back(op: str, kernel: str, mode: str, chosen: str, reason: str) -> None:
    """``kernel`` cannot serve this call: the kernel fallback rule (a pin under
    fallback='error' raises UnsupportedOperationError; otherwise warned/recorded)."""
    policy.note_kernel_fallback(op=op, kernel=kernel, entry_mode=mode, chosen=chosen, reason=reason)


class Where(TypedDict):
    """Where a call ran, as the shape/dtype/device keywords of a decision record."""

    shape: str
    dtype: str
    device: str


def describe(tensor: torch.Tensor) -> Where:
    """The shape/dtype/device keywords of a decision record for ``tensor``."""
    return {
        "shape": "x".join(str(size) for size in tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "device": str(tensor.device),
    }


def note_call(
    op: str,
    kernel: str,
    mode: str,
    reason: str,
    tensor: torch.Tensor,
    status: DecisionStatus = "decided",
) -> None:
    """Record an op call's decision; a repeat of a recorded call costs one set lookup."""
    if policy.already_noted((op, kernel, mode, status, tensor.shape, tensor.dtype, tensor.device)):
        return
    policy.note_decision(op, kernel, mode, reason, status=status, **describe(tensor))
