"""``fused_layernorm``: layer normalisation on the core's kernel or PyTorch's.

The policy's ``layernorm`` entry picks the kernel: ``"xrt"`` (the core's kernel: CUDA
fp32/fp16/bf16 and CPU) or ``"cpu"`` (the core's CPU reference) run in xpuruntime's native
core with tensors shared through DLPack (no copy); ``"torch"`` runs
``torch.nn.functional.layer_norm``. Without a policy the core's dispatcher picks among its
kernels where one supports the input, and PyTorch serves the rest; the decision record says
which ran and why.

Backward uses PyTorch's ``native_layer_norm_backward`` (statistics recomputed), so gradients
are PyTorch's whatever kernel ran forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP
from xpuruntime.pytorch.ops import _core_kernels
from xpuruntime.pytorch.ops._policy import (
    describe,
    fall_back,
    off_device_reason,
    requested_kernel,
)

__all__ = ["fused_layernorm"]


def _choose(kernel: str, mode: str, x: Tensor) -> tuple[str, str]:
    """(kernel that runs, reason) applying pin / prefer / auto to the core's answer."""
    if kernel == "torch":
        return "torch", "policy names PyTorch's kernel"
    reason = None if kernel == "auto" else off_device_reason("layernorm", kernel, x)
    if reason is None:
        core_kernel, said = _core_kernels.layernorm_kernel(x, "" if kernel == "auto" else kernel)
        if core_kernel is not None:
            return core_kernel, f"core dispatcher: {said}"
        if kernel == "auto":
            return "torch", f"the core cannot serve it: {said}"
        reason = f"the core cannot run it on {x.dtype} {tuple(x.shape)} on {x.device}: {said}"
    fall_back("layernorm", kernel, mode, "torch", reason)  # raises for a pin under 'error'
    return "torch", f"fallback from {kernel}: {reason}"


def _fused_layernorm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    kernel: str,
    mode: str,
) -> Tensor:
    chosen, reason = _choose(kernel, mode, input)
    policy.note_decision("layernorm", chosen, mode, reason, **describe(input))
    if chosen == "torch":
        return F.layer_norm(input, list(normalized_shape), weight, bias, eps).contiguous()
    width = math.prod(normalized_shape)
    ones_weight = weight if weight is not None else input.new_ones(normalized_shape)
    zero_bias = bias if bias is not None else input.new_zeros(normalized_shape)
    output = _core_kernels.layernorm(
        input.contiguous().reshape(-1, width),
        ones_weight.contiguous().reshape(width),
        zero_bias.contiguous().reshape(width),
        eps,
        chosen,
    )
    return output.reshape(input.shape)


def _fused_layernorm_fake(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    kernel: str,
    mode: str,
) -> Tensor:
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    input, normalized_shape, weight, bias, eps, _kernel, _mode = inputs
    ctx.save_for_backward(input, weight, bias)
    ctx.normalized_shape, ctx.eps = list(normalized_shape), eps


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    input, weight, bias = ctx.saved_tensors
    _, mean, rstd = torch.ops.aten.native_layer_norm(
        input, ctx.normalized_shape, weight, bias, ctx.eps
    )
    mask = [
        ctx.needs_input_grad[0],
        weight is not None and ctx.needs_input_grad[2],
        bias is not None and ctx.needs_input_grad[3],
    ]
    d_input, d_weight, d_bias = torch.ops.aten.native_layer_norm_backward(
        grad.contiguous(), input, ctx.normalized_shape, mean, rstd, weight, bias, mask
    )
    return d_input, None, d_weight, d_bias, None, None, None


if HAS_CUSTOM_OP:
    _op = torch.library.custom_op("xpuruntime::fused_layernorm", _fused_layernorm, mutates_args=())
    _op.register_fake(_fused_layernorm_fake)
    _op.register_autograd(_backward, setup_context=_setup_context)


def fused_layernorm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation over the trailing ``normalized_shape`` dimensions.

    Same arguments and result as ``torch.nn.functional.layer_norm``; the kernel follows the
    policy's ``layernorm`` entry (``xrt``, ``cpu``, ``torch``).
    """
    kernel, mode = requested_kernel("layernorm")
    if not HAS_CUSTOM_OP:
        if input.requires_grad and torch.is_grad_enabled() and kernel == "auto":
            kernel = "torch"  # the core's kernel has autograd only as a custom op (2.4+)
        return _fused_layernorm(input, list(normalized_shape), weight, bias, eps, kernel, mode)
    return torch.ops.xpuruntime.fused_layernorm(  # type: ignore[no-any-return]
        input, list(normalized_shape), weight, bias, float(eps), kernel, mode
    )
