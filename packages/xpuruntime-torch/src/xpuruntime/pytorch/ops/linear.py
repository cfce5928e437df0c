"""``fused_linear``: ``activation(x @ weight.T + bias)`` on the core's fused GEMM epilogues.

The policy's ``linear`` entry picks the kernel: ``"cublasLt"`` (CUDA: one cuBLASLt GEMM with
the BIAS / RELU_BIAS / GELU_AUX_BIAS epilogue), ``"cpu"`` (the core's CPU reference) or
``"torch"`` (``F.linear`` then the activation). Without a policy the core runs it where it
can (CUDA fp32/fp16/bf16, CPU fp32/fp64) and PyTorch serves the rest; the decision record
says which ran and why. ``activation="gelu"`` is GELU's tanh approximation (what cuBLASLt
computes; ``F.gelu(..., approximate="tanh")``).

Backward: the activation's derivative from what forward saved (the pre-activation that the
GELU_AUX epilogue stored, or the ReLU output), ``dx = dz @ weight``, and ``dweight`` with
``dbias`` from one GEMM with the BGRADB epilogue (the op
``xpuruntime::fused_linear_weight_grad``), so the bias gradient costs no extra pass.

The two ops are defined and implemented in C++ (``csrc/linear_ops.cpp``: CPU, CUDA, Meta and
Autograd kernels, the autograd node included). What stays here is the kernel choice: made
and recorded on the first call of its kind under the policy in effect (that call runs the
core and reads back its dispatcher's decision), then one dict lookup per call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xpuruntime.pytorch import policy
from xpuruntime.pytorch.ops._eager import plain_eager
from xpuruntime.pytorch.ops._native import native
from xpuruntime.pytorch.ops._policy import describe, fall_back, requested_kernel
from xpuruntime.runtime.errors import InvalidArgumentError, UnsupportedOperationError

__all__ = ["fused_linear"]

_ACTIVATIONS = ("none", "relu", "gelu")
_TORCH = int(native.CHOICE_TORCH)
_CORE = int(native.CHOICE_CORE)

# (kernel, mode, activation, tensor metadata) -> choice, for the policy record in effect.
_choices: dict[tuple[Any, ...], int] = {}
_choices_record: object = None


def _key(
    kernel: str, mode: str, activation: str, x: Tensor, weight: Tensor, bias: Tensor | None
) -> tuple[Any, ...]:
    """What the choice depends on, read cheaply (it is built on every call): the input's
    shape, dtype and device, the weight's shape, and the layouts (the core refuses some
    strided views). The weight's and bias's dtype and device are left out: one that differs
    from the input's is an error on either kernel, raised by the call that runs."""
    global _choices_record
    record = policy.current_record()
    if record is not _choices_record:  # a new policy (or scope): decide and record anew
        _choices.clear()
        _choices_record = record
    return (
        kernel,
        mode,
        activation,
        x.shape,
        x.dtype,
        x.get_device(),
        True if x.is_contiguous() else x.stride(),
        weight.shape,
        True if weight.is_contiguous() else weight.stride(),
        None if bias is None else bias.is_contiguous(),
    )


def _decide(
    kernel: str, mode: str, activation: str, x: Tensor, weight: Tensor, bias: Tensor | None
) -> tuple[int, Tensor]:
    """(choice, y): run the call, on the core unless the policy names PyTorch's kernel or
    the core refuses it, and record which kernel ran and why."""
    if activation not in _ACTIVATIONS:
        raise InvalidArgumentError(
            f"fused_linear: activation must be None, 'relu' or 'gelu', got {activation!r}"
        )
    if kernel == "torch":
        choice, chosen, reason = _TORCH, "torch", "policy names PyTorch's kernel"
        y = native.linear_forward(x, weight, bias, activation, kernel, mode, _TORCH, False)
    else:
        try:
            y, decided = native.linear_forward(
                x, weight, bias, activation, kernel, mode, _CORE, True
            )
        except UnsupportedOperationError as error:
            if kernel != "auto":  # the kernel fallback rule: a pin under 'error' raises
                fall_back("linear", kernel, mode, "torch", str(error))
            choice, chosen, reason = _TORCH, "torch", f"the core cannot serve it: {error}"
            y = native.linear_forward(x, weight, bias, activation, kernel, mode, _TORCH, False)
        else:
            choice = _CORE
            decided_kernel, fallen_back, decided_reason = decided
            if mode == "prefer":
                if fallen_back:
                    fall_back("linear", kernel, mode, decided_kernel, decided_reason)
                chosen, reason = decided_kernel, f"core dispatcher: {decided_reason}"
            else:
                chosen = "cublasLt" if x.is_cuda else "cpu"
                reason = "core dispatcher: fused GEMM epilogue"
    policy.note_decision("linear", chosen, mode, reason, **describe(x))
    return choice, y


def _resolve(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, kernel: str, mode: str
) -> int:
    """The native dispatcher kernels' question: which kernel runs this call. A first call of
    its kind is decided by running it once here (its result is dropped: the kernel that
    asked runs the call itself)."""
    key = _key(kernel, mode, activation, x, weight, bias)
    choice = _choices.get(key)
    if choice is None:
        with torch.no_grad():
            choice = _decide(kernel, mode, activation, x, weight, bias)[0]
        _choices[key] = choice
    return choice


native.set_linear_hooks(_resolve, fall_back)


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
    if not plain_eager(input, weight, bias):
        out: Tensor = torch.ops.xpuruntime.fused_linear(input, weight, bias, act, kernel, mode)[0]
        return out
    # A plain eager call: the choice looked up (decided on the first call of its kind), then
    # one call into C++, which runs the kernel and the C++ autograd node.
    key = _key(kernel, mode, act, input, weight, bias)
    choice = _choices.get(key)
    if choice is None:
        choice, first = _decide(kernel, mode, act, input, weight, bias)
        _choices[key] = choice
        return first
    y: Tensor = native.linear_forward(input, weight, bias, act, kernel, mode, choice, False)
    return y
