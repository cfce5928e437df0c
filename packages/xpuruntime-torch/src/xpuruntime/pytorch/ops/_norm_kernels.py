"""LayerNorm and RMSNorm for the custom ops: which kernel runs a call.

The kernel a call runs follows the policy's ``layernorm`` / ``rmsnorm`` entry: ``xrt`` (the
core's kernels: CUDA float32/float16/bfloat16, CPU float32/float64) or ``cpu`` (the core's
CPU reference) run in the native core on PyTorch's memory; ``torch`` runs PyTorch's own
kernels. The choice is made once per (policy, op, shapes, dtypes, devices) through the
core's dispatcher, recorded once, and looked up in a dict afterwards. Running it is C++
(``csrc/norm_ops.cpp``): the core's kernel through its C kernel table with raw pointers and
PyTorch's current stream, or PyTorch's own ATen kernels.

Forward returns the row statistics (``[2, rows]`` mean and rstd for LayerNorm, ``[1, rows]``
rstd for RMSNorm; float32, float64 for float64 inputs) that the backward takes. The residual
form normalises ``s = x + residual`` (rounded to the input dtype) and returns it too; its
backward adds the gradient reaching ``s`` to dx, which is then the gradient of both x and
residual.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from xpuruntime.policies import KernelPolicy
from xpuruntime.pytorch import policy
from xpuruntime.pytorch.ops._policy import describe, fall_back
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    XpuRuntimeError,
)

__all__ = ["LAYERNORM", "RMSNORM", "TORCH", "Norm", "kernel_for"]

TORCH = "torch"


@dataclass(frozen=True)
class Norm:
    """One norm: its policy op name and what its kernels take."""

    op: str  # policy op and core op: "layernorm" / "rmsnorm"
    rms: bool
    stats_rows: int  # (mean, rstd) or (rstd,)


LAYERNORM = Norm("layernorm", False, 2)
RMSNORM = Norm("rmsnorm", True, 1)


# ---------------------------------------------------------------------------------------
# Which kernel runs a call: decided once per key, then a dict lookup.

_TensorMeta = tuple[torch.Size, torch.dtype, int] | None
_choices: dict[tuple[Any, ...], str] = {}
_choices_record: object = None  # the policy record the cached choices were noted in


def _meta(tensor: Tensor | None) -> _TensorMeta:
    return None if tensor is None else (tensor.shape, tensor.dtype, tensor.get_device())


def kernel_for(
    norm: Norm,
    kernel: str,
    mode: str,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
) -> str:
    """The kernel that runs this call (``xrt``, ``cpu`` or ``torch``), decided and recorded
    on the first call of its kind under the current policy."""
    global _choices_record
    record = policy.current_record()
    if record is not _choices_record:  # a new policy (or scope): decide and record anew
        _choices.clear()
        _choices_record = record
    key = (
        norm.op,
        kernel,
        mode,
        x.shape,
        x.dtype,
        x.get_device(),
        tuple(normalized_shape),
        None if residual is None else _meta(residual),
        None if weight is None else _meta(weight),
        None if bias is None else _meta(bias),
    )
    chosen = _choices.get(key)
    if chosen is None:
        chosen = _decide(norm, kernel, mode, x, residual, normalized_shape, weight, bias)
        _choices[key] = chosen
    return chosen


def _check_shapes(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
) -> None:
    shape = tuple(normalized_shape)
    if not shape or x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape) :]) != shape:
        raise InvalidArgumentError(
            f"{norm.op}: normalized_shape {list(shape)} must be the trailing dimensions of the "
            f"input, whose shape is {list(x.shape)}"
        )
    for name, tensor in (("weight", weight), ("bias", bias)):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise InvalidArgumentError(
                f"{norm.op}: {name} must have shape normalized_shape {list(shape)}, got "
                f"{list(tensor.shape)}"
            )
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise InvalidArgumentError(
            f"{norm.op}: residual must have the input's shape and dtype "
            f"({list(x.shape)} {x.dtype}), got {list(residual.shape)} {residual.dtype}; "
            "convert it first"
        )


def _core_refusal(
    x: Tensor, residual: Tensor | None, weight: Tensor | None, bias: Tensor | None
) -> str:
    """Why the core's kernels cannot take these tensors together ("" when they can)."""
    for name, tensor in (("residual", residual), ("weight", weight), ("bias", bias)):
        if tensor is None:
            continue
        if tensor.dtype != x.dtype:
            return (
                f"{name} is {tensor.dtype} but the input is {x.dtype}: the core's kernels take "
                "one dtype"
            )
        if tensor.device != x.device:
            return f"{name} is on {tensor.device} but the input is on {x.device}"
    return ""


def _decide(
    norm: Norm,
    kernel: str,
    mode: str,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
) -> str:
    """Apply pin / prefer / auto to what the core's dispatcher says; record the decision."""
    _check_shapes(norm, x, residual, normalized_shape, weight, bias)
    where = describe(x)
    if kernel == TORCH:
        chosen, reason = TORCH, "policy names PyTorch's kernel"
    else:
        core_kernel, reason = _core_kernel(norm, kernel, x, normalized_shape)
        refusal = _core_refusal(x, residual, weight, bias) if core_kernel is not None else ""
        if core_kernel is not None and not refusal:
            chosen, reason = core_kernel, f"core dispatcher: {reason}"
        else:
            reason = refusal or reason
            if kernel == "auto":
                chosen, reason = TORCH, f"the core cannot serve it: {reason}"
            else:
                # The kernel fallback rule shared with inference: a pin under
                # fallback='error' raises; otherwise PyTorch's kernel runs, warned or recorded.
                fall_back(
                    norm.op,
                    kernel,
                    mode,
                    TORCH,
                    f"{kernel!r} cannot run on {x.dtype} {tuple(x.shape)} on {x.device}: {reason}",
                )
                chosen, reason = TORCH, f"fallback from {kernel}: {reason}"
    policy.note_decision(norm.op, chosen, mode, reason, **where)
    return chosen


def _core_kernel(
    norm: Norm, kernel: str, x: Tensor, normalized_shape: Sequence[int]
) -> tuple[str | None, str]:
    """(core kernel for ``x``, reason) or (None, why none can) from the core's dispatcher."""
    width = int(x.shape[-1]) if len(normalized_shape) == 1 else math.prod(normalized_shape)
    rows = x.numel() // width if width else 0
    requested = KernelPolicy(**{norm.op: kernel}) if kernel != "auto" else None
    try:
        decision = dispatcher.resolve(
            norm.op, [rows, width], str(x.dtype).removeprefix("torch."), str(x.device), requested
        )
    except XpuRuntimeError as error:
        return None, str(error)
    return decision.kernel, decision.reason
