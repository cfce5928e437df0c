"""LayerNorm and RMSNorm as PyTorch custom ops: the policy surface of the native ops.

Six ops in namespace ``xpuruntime`` (``fused_layernorm``, ``fused_add_layernorm``,
``fused_layernorm_backward`` and the ``rmsnorm`` three) are defined and implemented in C++
(``csrc/norm_ops.cpp``: CPU, CUDA, Meta and Autograd kernels on the core's C kernel table).
Forward ops return ``(y, stats)`` or, in the residual form ``fused_add_*``, ``(y, s, stats)``.

What stays in Python is the kernel choice: :func:`run_norm` resolves it once per (policy
state, signature) through :func:`~._norm_kernels.kernel_for` and hands the native entry point
the answer; the dispatcher's kernels (torch.compile, opcheck, tracing) ask :func:`_resolve`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from xpuruntime.pytorch.ops._eager import plain_eager
from xpuruntime.pytorch.ops._native import native
from xpuruntime.pytorch.ops._norm_kernels import LAYERNORM, RMSNORM, TORCH, Norm, kernel_for
from xpuruntime.pytorch.ops._policy import requested_kernel
from xpuruntime.runtime.errors import InvalidArgumentError

__all__ = ["default_eps", "normalized_list", "run_norm"]


def _choice(chosen: str) -> int:
    return int(native.CHOICE_TORCH if chosen == TORCH else native.CHOICE_CORE)


def _resolve(
    rms: bool,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: list[int],
    weight: Tensor | None,
    bias: Tensor | None,
    kernel: str,
    mode: str,
) -> int:
    """The native dispatcher kernels' question: which kernel runs this call (decided and
    recorded on the first call of its kind under the policy in effect)."""
    norm = RMSNORM if rms else LAYERNORM
    if rms and bias is not None:
        raise InvalidArgumentError("rmsnorm takes no bias; add it to the output instead")
    return _choice(kernel_for(norm, kernel, mode, x, residual, normalized_shape, weight, bias))


native.set_resolver(_resolve)


@dataclass(frozen=True)
class _Ops:
    forward: Any  # torch.ops.xpuruntime.fused_<norm>.default
    add: Any  # fused_add_<norm>


_ops = {
    norm.op: _Ops(
        getattr(torch.ops.xpuruntime, f"fused_{norm.op}").default,
        getattr(torch.ops.xpuruntime, f"fused_add_{norm.op}").default,
    )
    for norm in (LAYERNORM, RMSNORM)
}


# ---------------------------------------------------------------------------------------
# What the public functions call.

_machine_eps: dict[torch.dtype, float] = {}


def normalized_list(normalized_shape: int | Sequence[int]) -> list[int]:
    """``normalized_shape`` as the list the ops take (an int is one dimension)."""
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    return list(normalized_shape)


def default_eps(x: Tensor, eps: float | None) -> float:
    """``eps``, or the machine epsilon of x's dtype when None (``rms_norm``'s default)."""
    if eps is not None:
        return float(eps)
    value = _machine_eps.get(x.dtype)
    if value is None:
        value = _machine_eps[x.dtype] = float(torch.finfo(x.dtype).eps)
    return value


def run_norm(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: list[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> tuple[Tensor, ...]:
    """The forward op's outputs for the policy in effect: (y,) or (y, s) on the eager path,
    (y, [s,] stats) through the dispatcher."""
    kernel, mode = requested_kernel(norm.op)
    if not plain_eager(x, residual, weight, bias):
        ops = _ops[norm.op]
        if residual is None:
            return tuple(ops.forward(x, normalized_shape, weight, bias, eps, kernel, mode))
        return tuple(ops.add(x, residual, normalized_shape, weight, bias, eps, kernel, mode))
    # A plain eager call: the choice resolved here (one cached lookup), then one call into
    # C++, which runs the kernel, and the C++ autograd node when an input requires grad.
    chosen = kernel_for(norm, kernel, mode, x, residual, normalized_shape, weight, bias)
    out = native.norm_forward(
        norm.rms, x, residual, normalized_shape, weight, bias, eps, _choice(chosen)
    )
    return (out,) if residual is None else tuple(out)
