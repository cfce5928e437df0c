"""LayerNorm and RMSNorm as PyTorch custom ops: registration, fakes, autograd, entry point.

Six ops in namespace ``xpuruntime`` (``fused_layernorm``, ``fused_add_layernorm``,
``fused_layernorm_backward`` and the ``rmsnorm`` three), each with CPU and CUDA kernels (in
:mod:`~xpuruntime.pytorch.ops._norm_kernels`), a fake (meta) kernel and an autograd kernel
whose backward is the ``_backward`` op. Forward ops return ``(y, stats)`` or, in the residual
form ``fused_add_*``, ``(y, s, stats)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP
from xpuruntime.pytorch.ops._eager import plain_eager
from xpuruntime.pytorch.ops._norm_kernels import (
    LAYERNORM,
    RMSNORM,
    TORCH,
    Norm,
    backward,
    forward,
    stats_dtype,
    torch_forward,
)
from xpuruntime.pytorch.ops._policy import describe, requested_kernel
from xpuruntime.runtime.errors import UnsupportedOperationError

__all__ = ["default_eps", "normalized_list", "run_norm"]


# ---------------------------------------------------------------------------------------
# Fakes and autograd. One schema for both norms (RMSNorm takes no bias: it must be None),
# so each function below serves both through `norm`.


def _fake_forward(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
) -> tuple[Tensor, Tensor | None, Tensor]:
    h = math.prod(normalized_shape)
    rows = x.numel() // h if h else 0
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    total = (
        torch.empty_like(x, memory_format=torch.contiguous_format) if residual is not None else None
    )
    return y, total, x.new_empty((norm.stats_rows, rows), dtype=stats_dtype(x.dtype))


_AFTER_AUTOGRAD = torch._C._after_autograd_keyset


@dataclass(frozen=True)
class _Ops:
    forward: Any  # torch.ops.xpuruntime.fused_<norm>.default
    add: Any  # fused_add_<norm>
    backward: Any  # fused_<norm>_backward


_ops: dict[str, _Ops] = {}


class _NormFunction(torch.autograd.Function):
    """Autograd kernel of the forward ops: the op below autograd, then the _backward op."""

    @staticmethod
    def forward(
        ctx: Any,
        norm: Norm,
        x: Tensor,
        residual: Tensor | None,
        normalized_shape: list[int],
        weight: Tensor | None,
        bias: Tensor | None,
        eps: float,
        kernel: str,
        mode: str,
    ) -> tuple[Tensor, ...]:
        ops = _ops[norm.op]
        with torch._C._AutoDispatchBelowAutograd():
            if residual is None:
                outputs = ops.forward(x, normalized_shape, weight, bias, eps, kernel, mode)
            else:
                outputs = ops.add(x, residual, normalized_shape, weight, bias, eps, kernel, mode)
        ctx.save_for_backward(x if residual is None else outputs[1], weight, outputs[-1])
        ctx.mark_non_differentiable(outputs[-1])
        ctx.set_materialize_grads(False)
        ctx.call = (norm, normalized_shape, eps, kernel, mode, residual is not None)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        run = _ops[ctx.call[0].op].backward
        dx, residual_grad, dweight, dbias = _gradients(ctx, grads, ctx.needs_input_grad[5], run)
        return (None, dx, residual_grad, None, dweight, dbias, None, None, None)


class _EagerNormFunction(torch.autograd.Function):
    """The same for plain eager calls: runs the op kernels' Python functions directly,
    without two trips through PyTorch's dispatcher, and returns (y,) or (y, s) only."""

    @staticmethod
    def forward(
        ctx: Any,
        call: tuple[Norm, list[int], float, str, str, bool],
        x: Tensor,
        residual: Tensor | None,
        weight: Tensor | None,
        bias: Tensor | None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        norm, normalized_shape, eps, kernel, mode, _ = call
        y, total, stats = forward(
            norm, x, residual, normalized_shape, weight, bias, eps, kernel, mode
        )
        ctx.call = call
        if total is None:
            ctx.save_for_backward(x, weight, stats)
            return y
        ctx.save_for_backward(total, weight, stats)
        ctx.set_materialize_grads(False)
        return y, total

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        run = partial(backward, ctx.call[0])
        dx, residual_grad, dweight, dbias = _gradients(ctx, grads, ctx.needs_input_grad[4], run)
        return (None, dx, residual_grad, dweight, dbias)


def _gradients(
    ctx: Any,
    grads: tuple[Tensor | None, ...],
    bias_grad: bool,
    run: Callable[..., tuple[Tensor, Tensor, Tensor]],
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
    """(dx, dresidual, dweight, dbias) of either Function; ``run`` is the backward op."""
    _, normalized_shape, _, kernel, mode, residual_form = ctx.call
    grad, grad_sum = grads[0], grads[1] if residual_form else None
    normalised, weight, stats = ctx.saved_tensors
    weight_grad = weight is not None and weight.requires_grad
    if grad is None:
        return grad_sum, grad_sum if residual_form else None, None, None
    dx, dweight, dbias = run(
        grad,
        normalised,
        normalized_shape,
        weight,
        stats,
        grad_sum,
        weight_grad,
        bias_grad,
        kernel,
        mode,
    )
    return (
        dx,
        dx if residual_form else None,
        dweight if weight_grad else None,
        dbias if bias_grad else None,
    )


def _needs_grad(
    x: Tensor, residual: Tensor | None, weight: Tensor | None, bias: Tensor | None
) -> bool:
    return torch.is_grad_enabled() and (
        x.requires_grad
        or (residual is not None and residual.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )


def _register(library: torch.library.Library, norm: Norm) -> _Ops:
    name = norm.op
    library.define(  # type: ignore[no-untyped-call]
        f"fused_{name}(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
        "float eps, str kernel, str mode) -> (Tensor, Tensor)"
    )
    library.define(  # type: ignore[no-untyped-call]
        f"fused_add_{name}(Tensor input, Tensor residual, int[] normalized_shape, "
        "Tensor? weight, Tensor? bias, float eps, str kernel, str mode) -> (Tensor, Tensor, Tensor)"
    )
    library.define(  # type: ignore[no-untyped-call]
        f"fused_{name}_backward(Tensor grad, Tensor input, int[] normalized_shape, "
        "Tensor? weight, Tensor stats, Tensor? grad_sum, bool weight_grad, bool bias_grad, "
        "str kernel, str mode) -> (Tensor, Tensor, Tensor)"
    )
    namespace = torch.ops.xpuruntime
    ops = _Ops(
        getattr(namespace, f"fused_{name}").default,
        getattr(namespace, f"fused_add_{name}").default,
        getattr(namespace, f"fused_{name}_backward").default,
    )

    def plain(x: Tensor, shape: list[int], weight: Tensor | None, bias: Tensor | None,
              eps: float, kernel: str, mode: str) -> tuple[Tensor, Tensor]:  # fmt: skip
        y, _, stats = forward(norm, x, None, shape, weight, bias, eps, kernel, mode)
        return y, stats  # type: ignore[return-value]

    def add(x: Tensor, residual: Tensor, shape: list[int], weight: Tensor | None,
            bias: Tensor | None, eps: float, kernel: str, mode: str
            ) -> tuple[Tensor, Tensor | None, Tensor | None]:  # fmt: skip
        return forward(norm, x, residual, shape, weight, bias, eps, kernel, mode)

    def grads(grad: Tensor, x: Tensor, shape: list[int], weight: Tensor | None, stats: Tensor,
              grad_sum: Tensor | None, weight_grad: bool, bias_grad: bool, kernel: str,
              mode: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        return backward(
            norm, grad, x, shape, weight, stats, grad_sum, weight_grad, bias_grad, kernel, mode
        )

    def plain_fake(x: Tensor, shape: list[int], weight: Tensor | None, bias: Tensor | None,
                   eps: float, kernel: str, mode: str) -> tuple[Tensor, Tensor]:  # fmt: skip
        y, _, stats = _fake_forward(norm, x, None, shape, weight)
        return y, stats

    def add_fake(x: Tensor, residual: Tensor, shape: list[int], weight: Tensor | None,
                 bias: Tensor | None, eps: float, kernel: str, mode: str
                 ) -> tuple[Tensor, Tensor | None, Tensor]:  # fmt: skip
        return _fake_forward(norm, x, residual, shape, weight)

    def grads_fake(grad: Tensor, x: Tensor, shape: list[int], weight: Tensor | None,
                   stats: Tensor, grad_sum: Tensor | None, weight_grad: bool, bias_grad: bool,
                   kernel: str, mode: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        dx = torch.empty_like(x, memory_format=torch.contiguous_format)
        empty = x.new_empty(0)
        dweight = weight.new_empty(weight.shape) if weight_grad and weight is not None else empty
        return dx, dweight, x.new_empty(shape) if bias_grad else empty

    def plain_autograd(keyset: Any, x: Tensor, shape: list[int], weight: Tensor | None,
                       bias: Tensor | None, eps: float, kernel: str, mode: str) -> Any:  # fmt: skip
        if _needs_grad(x, None, weight, bias):
            return _NormFunction.apply(norm, x, None, shape, weight, bias, eps, kernel, mode)  # type: ignore[no-untyped-call]
        return ops.forward.redispatch(
            keyset & _AFTER_AUTOGRAD, x, shape, weight, bias, eps, kernel, mode
        )

    def add_autograd(keyset: Any, x: Tensor, residual: Tensor, shape: list[int],
                     weight: Tensor | None, bias: Tensor | None, eps: float, kernel: str,
                     mode: str) -> Any:  # fmt: skip
        if _needs_grad(x, residual, weight, bias):
            return _NormFunction.apply(norm, x, residual, shape, weight, bias, eps, kernel, mode)  # type: ignore[no-untyped-call]
        return ops.add.redispatch(
            keyset & _AFTER_AUTOGRAD, x, residual, shape, weight, bias, eps, kernel, mode
        )

    for op_name, kernel_fn, fake, autograd in (
        (f"fused_{name}", plain, plain_fake, plain_autograd),
        (f"fused_add_{name}", add, add_fake, add_autograd),
        (f"fused_{name}_backward", grads, grads_fake, None),
    ):
        for key in ("CPU", "CUDA"):
            library.impl(op_name, kernel_fn, key)  # type: ignore[no-untyped-call]
        torch.library.register_fake(f"xpuruntime::{op_name}", fake, lib=library)
        if autograd is not None:
            library.impl(op_name, autograd, "Autograd", with_keyset=True)  # type: ignore[no-untyped-call]
    return ops


if HAS_CUSTOM_OP:
    _library = torch.library.Library("xpuruntime", "FRAGMENT")  # type: ignore[no-untyped-call]
    for _norm in (LAYERNORM, RMSNORM):
        _ops[_norm.op] = _register(_library, _norm)


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
    """The forward op's outputs (y, [s,] stats) for the policy in effect."""
    kernel, mode = requested_kernel(norm.op)
    if HAS_CUSTOM_OP and not plain_eager(x, residual, weight, bias):
        ops = _ops[norm.op]
        if residual is None:
            return tuple(ops.forward(x, normalized_shape, weight, bias, eps, kernel, mode))
        return tuple(ops.add(x, residual, normalized_shape, weight, bias, eps, kernel, mode))
    if HAS_CUSTOM_OP:
        # A plain eager call: what the op would do, without two trips through PyTorch's
        # dispatcher into Python (the bulk of a custom op's host time).
        if _needs_grad(x, residual, weight, bias):
            call = (norm, normalized_shape, eps, kernel, mode, residual is not None)
            outputs = _EagerNormFunction.apply(call, x, residual, weight, bias)  # type: ignore[no-untyped-call]
            return (outputs,) if residual is None else outputs
        y, total, _ = forward(
            norm, x, residual, normalized_shape, weight, bias, eps, kernel, mode, keep_stats=False
        )
        return (y,) if residual is None else (y, total)  # type: ignore[return-value]
    # PyTorch < 2.4 cannot register custom-op autograd: training runs PyTorch's kernels
    # (differentiable as they are), inference the policy's.
    if _needs_grad(x, residual, weight, bias):
        if kernel not in ("auto", TORCH):
            raise UnsupportedOperationError(
                f"{norm.op}={kernel!r} needs PyTorch >= 2.4 to differentiate through the "
                f"core's kernel (this is {torch.__version__}); use {norm.op}='torch' or "
                "'auto' for training"
            )
        policy.note_decision(
            norm.op,
            TORCH,
            mode,
            "PyTorch < 2.4 has no custom-op autograd: training runs PyTorch's kernel",
            **describe(x),
        )
        outputs = torch_forward(norm, x, residual, normalized_shape, weight, bias, eps)
    else:
        outputs = forward(norm, x, residual, normalized_shape, weight, bias, eps, kernel, mode)
    y, total, stats = outputs
    return (y, stats) if residual is None else (y, total, stats)  # type: ignore[return-value]
