"""LayerNorm and RMSNorm as PyTorch custom ops on the core's kernels: the shared machinery.

Six ops in namespace ``xpuruntime`` (``fused_layernorm``, ``fused_add_layernorm``,
``fused_layernorm_backward`` and the ``rmsnorm`` three), each with CPU and CUDA kernels, a
fake (meta) kernel and an autograd kernel whose backward is the ``_backward`` op.

The kernel a call runs follows the policy's ``layernorm`` / ``rmsnorm`` entry: ``xrt`` (the
core's kernels: CUDA float32/float16/bfloat16, CPU float32/float64) or ``cpu`` (the core's
CPU reference) run in the native core on PyTorch's memory; ``torch`` runs PyTorch's own
kernels. The choice is made once per (policy, op, shapes, dtypes, devices) through the
core's dispatcher, recorded once, and looked up in a dict afterwards, so a call costs a
dict lookup, the output allocations and one native launch: the core's kernel is called with
raw pointers and PyTorch's current stream (no DLPack exchange, no string work).

Forward ops return the row statistics (``[2, rows]`` mean and rstd for LayerNorm,
``[1, rows]`` rstd for RMSNorm; float32, float64 for float64 inputs) that the backward takes.
The residual form ``fused_add_*`` returns ``(y, s, stats)`` with ``s = input + residual``
(rounded to the input dtype) and ``y = norm(s)``; its backward adds the gradient reaching
``s`` to dx, which is then the gradient of both input and residual.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.policies import KernelPolicy
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import HAS_CUSTOM_OP, current_raw_stream, is_compiling
from xpuruntime.pytorch.ops._policy import requested_kernel
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    UnsupportedOperationError,
    XpuRuntimeError,
)
from xpuruntime.runtime.native import core

__all__ = ["LAYERNORM", "RMSNORM", "Norm", "norm_op", "normalized_list", "run_norm"]

TORCH = "torch"


@dataclass(frozen=True)
class Norm:
    """One norm: its policy op name and what its kernels take."""

    op: str  # policy op and core op: "layernorm" / "rmsnorm"
    rms: bool
    stats_rows: int  # (mean, rstd) or (rstd,)
    torch_function: str  # PyTorch's equivalent, for messages


LAYERNORM = Norm("layernorm", False, 2, "torch.nn.functional.layer_norm")
RMSNORM = Norm("rmsnorm", True, 1, "torch.nn.functional.rms_norm")


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


def _describe(x: Tensor) -> dict[str, str]:
    return {
        "shape": "x".join(str(size) for size in x.shape),
        "dtype": str(x.dtype).removeprefix("torch."),
        "device": str(x.device),
    }


def _check_shapes(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
) -> None:
    shape = tuple(normalized_shape)
    if not shape or tuple(x.shape[x.dim() - len(shape) :]) != shape or x.dim() < len(shape):
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
    where = _describe(x)
    if kernel == TORCH:
        chosen, reason = TORCH, "policy names PyTorch's kernel"
    else:
        core_kernel, reason = _core_kernel(norm, kernel, x)
        refusal = _core_refusal(x, residual, weight, bias) if core_kernel is not None else ""
        if core_kernel is not None and not refusal:
            chosen, reason = core_kernel, f"core dispatcher: {reason}"
        else:
            reason = refusal or reason
            if kernel == "auto":
                chosen, reason = TORCH, f"the core cannot serve it: {reason}"
            elif mode == "pin":
                raise UnsupportedOperationError(
                    f"{norm.op} pinned to {kernel!r} cannot run on {x.dtype} "
                    f"{tuple(x.shape)} on {x.device}: {reason}. Use {norm.op}='torch', or "
                    f"OpPolicy(kernel={kernel!r}, mode='prefer') to allow PyTorch's kernel "
                    "as fallback."
                )
            else:
                policy.note_fallback(what=norm.op, requested=kernel, chosen=TORCH, reason=reason)
                chosen, reason = TORCH, f"fallback from {kernel}: {reason}"
    policy.note_decision(norm.op, chosen, mode, reason, **where)
    return chosen


def _core_kernel(norm: Norm, kernel: str, x: Tensor) -> tuple[str | None, str]:
    """(core kernel for ``x``, reason) or (None, why none can) from the core's dispatcher."""
    width = x.shape[-1] if x.dim() else 0
    rows = x.numel() // width if width else 0
    requested = KernelPolicy(**{norm.op: kernel}) if kernel != "auto" else None
    try:
        decision = dispatcher.resolve(
            norm.op, [rows, width], str(x.dtype).removeprefix("torch."), str(x.device), requested
        )
    except XpuRuntimeError as error:
        return None, str(error)
    return decision.kernel, decision.reason


# ---------------------------------------------------------------------------------------
# The core's kernels on PyTorch's memory.

_forward_raw: Callable[..., None] | None = None
_backward_raw: Callable[..., None] | None = None
_workspace_raw: Callable[..., int] | None = None
_codes: dict[torch.dtype, int] = {}
_workspaces: dict[tuple[Any, ...], int] = {}


def _load_core() -> None:
    global _forward_raw, _backward_raw, _workspace_raw
    native = core()
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        _codes[dtype] = int(native.NORM_DTYPE_CODES[str(dtype).removeprefix("torch.")])
    _forward_raw, _backward_raw = native.norm_forward_raw, native.norm_backward_raw
    _workspace_raw = native.norm_backward_workspace_bytes


def _workspace(
    norm: Norm, x: Tensor, rows: int, h: int, dweight: bool, dbias: bool
) -> Tensor | None:
    """PyTorch memory for the backward's dweight/dbias partial sums (CUDA only): allocated by
    PyTorch's allocator, so streams and CUDA graph capture treat it like any tensor."""
    device = x.get_device()
    if device < 0 or not (dweight or dbias):
        return None
    key = (norm.rms, x.dtype, device, rows, h, dweight, dbias)
    size = _workspaces.get(key)
    if size is None:
        assert _workspace_raw is not None
        size = _workspaces[key] = int(
            _workspace_raw(norm.rms, _codes[x.dtype], device, rows, h, dweight, dbias)
        )
    return x.new_empty(size, dtype=torch.uint8) if size else None


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype is torch.float64 else torch.float32


def _width(x: Tensor, normalized_shape: Sequence[int]) -> int:
    return int(x.shape[-1]) if len(normalized_shape) == 1 else math.prod(normalized_shape)


def _pointer(tensor: Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def _contiguous(tensor: Tensor | None) -> Tensor | None:
    return tensor if tensor is None or tensor.is_contiguous() else tensor.contiguous()


def _core_forward(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    keep_stats: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    if _forward_raw is None:
        _load_core()
    assert _forward_raw is not None
    x = x if x.is_contiguous() else x.contiguous()
    residual, weight, bias = _contiguous(residual), _contiguous(weight), _contiguous(bias)
    h = _width(x, normalized_shape)
    rows = x.numel() // h if h else 0
    y = torch.empty_like(x)
    total = torch.empty_like(x) if residual is not None else None
    stats = (
        x.new_empty((norm.stats_rows, rows), dtype=_stats_dtype(x.dtype)) if keep_stats else None
    )
    first = stats.data_ptr() if stats is not None else 0
    device = x.get_device()
    _forward_raw(
        norm.rms,
        _codes[x.dtype],
        device,
        rows,
        h,
        x.data_ptr(),
        _pointer(residual),
        _pointer(weight),
        _pointer(bias),
        y.data_ptr(),
        _pointer(total),
        0 if norm.rms or stats is None else first,
        first + rows * stats.element_size() if stats is not None and not norm.rms else first,
        eps,
        current_raw_stream(device) if device >= 0 else 0,
    )
    return y, total, stats


def _core_backward(
    norm: Norm,
    grad: Tensor,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    stats: Tensor,
    grad_sum: Tensor | None,
    weight_grad: bool,
    bias_grad: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    if _backward_raw is None:
        _load_core()
    assert _backward_raw is not None
    grad = grad if grad.is_contiguous() else grad.contiguous()
    x = x if x.is_contiguous() else x.contiguous()
    weight, grad_sum, stats = _contiguous(weight), _contiguous(grad_sum), stats.contiguous()
    h = _width(x, normalized_shape)
    rows = x.numel() // h if h else 0
    dx = torch.empty_like(x)
    dweight = weight.new_empty(weight.shape) if weight_grad and weight is not None else None
    dbias = x.new_empty(normalized_shape) if bias_grad else None
    workspace = _workspace(norm, x, rows, h, dweight is not None, dbias is not None)
    first = stats.data_ptr()
    device = x.get_device()
    _backward_raw(
        norm.rms,
        _codes[x.dtype],
        device,
        rows,
        h,
        grad.data_ptr(),
        x.data_ptr(),
        _pointer(weight),
        0 if norm.rms else first,
        first + rows * stats.element_size() if not norm.rms else first,
        _pointer(grad_sum),
        dx.data_ptr(),
        _pointer(dweight),
        _pointer(dbias),
        _pointer(workspace),
        workspace.numel() if workspace is not None else 0,
        current_raw_stream(device) if device >= 0 else 0,
    )
    empty = x.new_empty(0)
    return dx, dweight if dweight is not None else empty, dbias if dbias is not None else empty


# ---------------------------------------------------------------------------------------
# PyTorch's kernels, for the "torch" choice (same outputs, so callers cannot tell).

# PyTorch's own fused RMSNorm with its rstd (2.8+; the backward on CUDA only); elsewhere the
# same maths in PyTorch's ops.
_fused_rms_norm: Callable[..., tuple[Tensor, Tensor]] | None = getattr(
    torch.ops.aten, "_fused_rms_norm", None
)
_fused_rms_norm_backward: Callable[..., tuple[Tensor, Tensor]] | None = getattr(
    torch.ops.aten, "_fused_rms_norm_backward", None
)


def _lead_shape(x: Tensor, normalized_shape: Sequence[int]) -> list[int]:
    return [*x.shape[: x.dim() - len(normalized_shape)], *([1] * len(normalized_shape))]


def _torch_forward(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    keep_stats: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    total = (x + residual).contiguous() if residual is not None else None
    source = total if total is not None else x
    shape = list(normalized_shape)
    if not keep_stats:  # eager inference, PyTorch >= 2.4: its public functions
        if norm.rms:
            return F.rms_norm(source, shape, weight, eps).contiguous(), total, None
        return F.layer_norm(source, shape, weight, bias, eps).contiguous(), total, None
    if norm.rms:
        if _fused_rms_norm is not None:
            y, rstd = _fused_rms_norm(source, shape, weight, eps)
        else:  # PyTorch < 2.8: the same computation in its ops
            dims = list(range(-len(shape), 0))
            wide = source.to(_stats_dtype(source.dtype))
            rstd = torch.rsqrt(wide.square().mean(dims, keepdim=True) + eps)
            y = (wide * rstd).to(source.dtype)
            y = y * weight if weight is not None else y
        stats = rstd.reshape(1, -1)
    else:
        y, mean, rstd = torch.ops.aten.native_layer_norm(source, shape, weight, bias, eps)
        stats = torch.stack((mean.reshape(-1), rstd.reshape(-1)))
    return y.contiguous(), total, stats.to(_stats_dtype(source.dtype))


def _torch_backward(
    norm: Norm,
    grad: Tensor,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    stats: Tensor,
    grad_sum: Tensor | None,
    weight_grad: bool,
    bias_grad: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    shape = list(normalized_shape)
    empty = x.new_empty(0)
    if norm.rms and _fused_rms_norm_backward is not None and x.is_cuda:  # CUDA-only kernel
        dx, dweight = _fused_rms_norm_backward(
            grad.contiguous(),
            x,
            shape,
            stats[0].reshape(_lead_shape(x, shape)),
            weight,
            [True, weight is not None and weight_grad],
        )
        dweight = dweight if dweight is not None else empty
        dbias = empty
    elif norm.rms:  # PyTorch's ops on the saved rstd
        dims = list(range(-len(shape), 0))
        lead = _lead_shape(x, shape)
        wide = _stats_dtype(x.dtype)
        xhat = x.to(wide) * stats[0].reshape(lead)
        scaled = grad.to(wide) * weight.to(wide) if weight is not None else grad.to(wide)
        dot = (xhat * scaled).mean(dims, keepdim=True)
        dx = (stats[0].reshape(lead) * (scaled - xhat * dot)).to(x.dtype)
        if weight is not None and weight_grad:
            rows = tuple(range(x.dim() - len(shape)))
            dweight = (grad.to(wide) * xhat).sum(rows).to(x.dtype)
        else:
            dweight = empty
        dbias = empty
    else:
        lead = _lead_shape(x, shape)
        mask = [True, weight is not None and weight_grad, bias_grad]
        dx, dweight, dbias = torch.ops.aten.native_layer_norm_backward(
            grad.contiguous(),
            x,
            shape,
            stats[0].reshape(lead),
            stats[1].reshape(lead),
            weight,
            x.new_zeros(shape) if bias_grad else None,
            mask,
        )
        dweight = dweight if dweight is not None else empty
        dbias = dbias if dbias is not None else empty
    if grad_sum is not None:
        dx = dx + grad_sum
    return dx.contiguous(), dweight, dbias


# ---------------------------------------------------------------------------------------
# The op kernels, fakes and autograd. One schema for both norms (RMSNorm takes no bias: it
# must be None), so each function below serves both through `norm`.


def forward(
    norm: Norm,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    kernel: str,
    mode: str,
    keep_stats: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(y, x + residual or None, stats or None) on the kernel the policy selects."""
    if norm.rms and bias is not None:
        raise InvalidArgumentError("rmsnorm takes no bias; add it to the output instead")
    chosen = kernel_for(norm, kernel, mode, x, residual, normalized_shape, weight, bias)
    run = _torch_forward if chosen == TORCH else _core_forward
    return run(norm, x, residual, normalized_shape, weight, bias, eps, keep_stats)


def backward(
    norm: Norm,
    grad: Tensor,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    stats: Tensor,
    grad_sum: Tensor | None,
    weight_grad: bool,
    bias_grad: bool,
    kernel: str,
    mode: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); dweight/dbias are empty where not asked for."""
    if norm.rms and bias_grad:
        raise InvalidArgumentError("rmsnorm has no bias, so there is no bias gradient")
    if grad.shape != x.shape or (grad_sum is not None and grad_sum.shape != x.shape):
        raise InvalidArgumentError(
            f"{norm.op} backward: grad {list(grad.shape)} and grad_sum must have the input's "
            f"shape {list(x.shape)}"
        )
    if stats.shape != (norm.stats_rows, x.numel() // max(_width(x, normalized_shape), 1)):
        raise InvalidArgumentError(
            f"{norm.op} backward: stats of shape {list(stats.shape)} are not the forward's"
        )
    chosen = kernel_for(norm, kernel, mode, x, grad_sum, normalized_shape, weight, None)
    run = _torch_backward if chosen == TORCH else _core_backward
    return run(norm, grad, x, normalized_shape, weight, stats, grad_sum, weight_grad, bias_grad)


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
    return y, total, x.new_empty((norm.stats_rows, rows), dtype=_stats_dtype(x.dtype))


_AFTER_AUTOGRAD = torch._C._after_autograd_keyset


@dataclass(frozen=True)
class _Ops:
    forward: Any  # torch.ops.xpuruntime.fused_<norm>.default
    add: Any  # fused_add_<norm>
    backward: Any  # fused_<norm>_backward


_ops: dict[str, _Ops] = {}


def norm_op(norm: Norm) -> _Ops:
    """The registered ops of ``norm`` (PyTorch >= 2.4)."""
    return _ops[norm.op]


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

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _plain_eager(
    x: Tensor, residual: Tensor | None, weight: Tensor | None, bias: Tensor | None
) -> bool:
    """True for an eager call on plain tensors that nothing intercepts: no compiler or tracer,
    no dispatch or function mode (fake tensors, functionalisation), no functorch transform,
    no tensor subclass. Only then may a call skip PyTorch's dispatcher."""
    return not (
        is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._are_functorch_transforms_active()
        or torch._C._get_tracing_state() is not None
        or type(x) not in _PLAIN_TENSORS
        or (residual is not None and type(residual) not in _PLAIN_TENSORS)
        or (weight is not None and type(weight) not in _PLAIN_TENSORS)
        or (bias is not None and type(bias) not in _PLAIN_TENSORS)
    )


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
    if HAS_CUSTOM_OP and not _plain_eager(x, residual, weight, bias):
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
            **_describe(x),
        )
        outputs = _torch_forward(norm, x, residual, normalized_shape, weight, bias, eps)
    else:
        outputs = forward(norm, x, residual, normalized_shape, weight, bias, eps, kernel, mode)
    y, total, stats = outputs
    return (y, stats) if residual is None else (y, total, stats)  # type: ignore[return-value]
