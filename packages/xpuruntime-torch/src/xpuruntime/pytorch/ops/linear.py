"""``fused_linear``: ``activation(x @ weight.T + bias)`` on the core's fused GEMM epilogues.

The policy's ``linear`` entry picks the kernel: ``"cublasLt"`` (CUDA: one cuBLASLt GEMM with
the BIAS / RELU_BIAS / GELU_AUX_BIAS epilogue), ``"cpu"`` (the core's CPU reference) or
``"torch"`` (``F.linear`` then the activation). Without a policy the core runs it where it
can (CUDA fp32/fp16/bf16, CPU fp32/fp64) and PyTorch serves the rest; the decision record
says which ran and why. ``activation="gelu"`` is GELU's tanh approximation (what cuBLASLt
computes; ``F.gelu(..., approximate="tanh")``).

Backward: the activation's derivative from what forward saved (the pre-activation that the
GELU_AUX epilogue stored, or the ReLU output), ``dx = dz @ weight``, and ``dweight`` with
``dbias`` from one GEMM with the BGRADB epilogue (the custom op
``xpuruntime::fused_linear_weight_grad``), so the bias gradient costs no extra pass.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import xpuruntime.ops as core_ops
from xpuruntime.policies import KernelPolicy
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP
from xpuruntime.pytorch.ops._policy import describe, fall_back, requested_kernel
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError

__all__ = ["fused_linear"]

_ACTIVATIONS = ("none", "relu", "gelu")


@functools.cache
def _core_policy(kernel: str, mode: str) -> KernelPolicy | None:
    if kernel == "auto":
        return None
    return KernelPolicy().set("linear", kernel, mode=mode)  # type: ignore[arg-type]


def _precision() -> str:
    """TF32 for fp32 GEMMs exactly when PyTorch's own matmuls may use it."""
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"


def _torch_linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str) -> Tensor:
    z = F.linear(x, weight, bias)
    if activation == "relu":
        return F.relu(z)
    if activation == "gelu":
        return F.gelu(z, approximate="tanh")
    return z


def _core_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, kernel: str, mode: str
) -> tuple[Tensor, Tensor | None, str, str]:
    """(y, pre-activation or None, kernel that ran, reason) on the core, or raises."""
    act = None if activation == "none" else activation
    save = act == "gelu"
    out = core_ops.linear(
        x.detach(),
        weight.detach(),
        None if bias is None else bias.detach(),
        act,  # type: ignore[arg-type]
        save_preactivation=save,
        policy=_core_policy(kernel, mode),
        precision=_precision() if x.dtype == torch.float32 else None,  # type: ignore[arg-type]
    )
    y, z = out if save else (out, None)
    if mode == "prefer":
        decision = core_ops.last_decision()
        assert decision is not None
        if decision.status == "fallen_back":
            fall_back("linear", kernel, mode, decision.kernel, decision.reason)
        return y, z, decision.kernel, f"core dispatcher: {decision.reason}"
    chosen = "cublasLt" if x.is_cuda else "cpu"
    return y, z, chosen, "core dispatcher: fused GEMM epilogue"


def _fused_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, kernel: str, mode: str
) -> tuple[Tensor, Tensor]:
    if activation not in _ACTIVATIONS:
        raise InvalidArgumentError(
            f"fused_linear: activation must be None, 'relu' or 'gelu', got {activation!r}"
        )
    out_shape = (*x.shape[:-1], weight.shape[0])
    if kernel != "torch":
        try:
            y, z, chosen, reason = _core_linear(x, weight, bias, activation, kernel, mode)
        except UnsupportedOperationError as error:
            if kernel != "auto":  # the kernel fallback rule: a pin under 'error' raises
                fall_back("linear", kernel, mode, "torch", str(error))
            reason = f"the core cannot serve it: {error}"
        else:
            policy.note_decision("linear", chosen, mode, reason, **describe(x))
            saved = z.reshape(out_shape) if z is not None else y.new_empty(0)
            # The pre-activation's padded row stride is the core's business: hand PyTorch
            # the contiguous tensor the fake implementation promises.
            return y.reshape(out_shape), saved.contiguous()
    else:
        reason = "policy names PyTorch's kernel"
    policy.note_decision("linear", "torch", mode, reason, **describe(x))
    if activation == "gelu":
        z = F.linear(x, weight, bias)
        return F.gelu(z, approximate="tanh"), z
    return _torch_linear(x, weight, bias, activation), x.new_empty(0)


def _fused_linear_fake(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, kernel: str, mode: str
) -> tuple[Tensor, Tensor]:
    out = x.new_empty((*x.shape[:-1], weight.shape[0]))
    return out, torch.empty_like(out) if activation == "gelu" else x.new_empty(0)


def _weight_grad(
    dz: Tensor, x: Tensor, bias_grad: bool, kernel: str, mode: str
) -> tuple[Tensor, Tensor]:
    """(dweight, dbias) = (dz^T x, dz summed over rows): the core's BGRADB GEMM."""
    dz2 = dz.reshape(-1, dz.shape[-1])
    x2 = x.reshape(-1, x.shape[-1])
    if kernel != "torch":
        try:
            dw, db = core_ops.linear_weight_grad(
                dz2.contiguous(),
                x2.contiguous(),
                bias_grad=bias_grad,
                policy=_core_policy(kernel, mode),
                precision=_precision() if x.dtype == torch.float32 else None,  # type: ignore[arg-type]
            )
            return dw, db if db is not None else dz.new_empty(0)
        except UnsupportedOperationError as error:
            if kernel != "auto":
                fall_back("linear", kernel, mode, "torch", f"weight gradient: {error}")
    dw = dz2.t().matmul(x2)
    return dw, dz2.sum(0) if bias_grad else dz.new_empty(0)


def _weight_grad_fake(
    dz: Tensor, x: Tensor, bias_grad: bool, kernel: str, mode: str
) -> tuple[Tensor, Tensor]:
    n, k = dz.shape[-1], x.shape[-1]
    return dz.new_empty((n, k)), dz.new_empty((n,) if bias_grad else (0,))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, weight, bias, activation, kernel, mode = inputs
    y, z = output
    saved = z if activation == "gelu" else y if activation == "relu" else None
    ctx.save_for_backward(x, weight, saved)
    ctx.has_bias = bias is not None
    ctx.activation, ctx.kernel, ctx.mode = activation, kernel, mode


def _backward(ctx: Any, grad: Tensor, _grad_preactivation: Tensor) -> tuple[Tensor | None, ...]:
    x, weight, saved = ctx.saved_tensors
    dz = grad
    if ctx.activation == "gelu":
        dz = torch.ops.aten.gelu_backward(grad, saved, approximate="tanh")
    elif ctx.activation == "relu":
        dz = torch.ops.aten.threshold_backward(grad, saved, 0)
    dx = dz.matmul(weight) if ctx.needs_input_grad[0] else None
    dw = db = None
    if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
        dw, db = torch.ops.xpuruntime.fused_linear_weight_grad(
            dz, x, ctx.has_bias, ctx.kernel, ctx.mode
        )
    return dx, dw, db if ctx.has_bias else None, None, None, None


if HAS_CUSTOM_OP:
    _op = torch.library.custom_op("xpuruntime::fused_linear", _fused_linear, mutates_args=())
    _op.register_fake(_fused_linear_fake)
    _op.register_autograd(_backward, setup_context=_setup_context)
    _wgrad = torch.library.custom_op(
        "xpuruntime::fused_linear_weight_grad", _weight_grad, mutates_args=()
    )
    _wgrad.register_fake(_weight_grad_fake)


def fused_linear(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
) -> Tensor:
    """``activation(input @ weight.T + bias)``; ``activation`` None, ``"relu"`` or ``"gelu"``
    (tanh approximation). Same arguments as ``torch.nn.functional.linear`` plus the
    activation; the kernel follows the policy's ``linear`` entry (``cublasLt``, ``cpu``,
    ``torch``)."""
    kernel, mode = requested_kernel("linear")
    act = activation or "none"
    if not HAS_CUSTOM_OP:
        return _torch_linear(input, weight, bias, act)  # autograd needs the custom op (2.4+)
    out: Tensor = torch.ops.xpuruntime.fused_linear(input, weight, bias, act, kernel, mode)[0]
    return out
