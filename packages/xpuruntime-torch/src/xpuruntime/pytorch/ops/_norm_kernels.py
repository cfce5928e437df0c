"""LayerNorm and RMSNorm for the custom ops: which kernel runs a call, and running it.

The kernel a call runs follows the policy's ``layernorm`` / ``rmsnorm`` entry: ``xrt`` (the
core's kernels: CUDA float32/float16/bfloat16, CPU float32/float64) or ``cpu`` (the core's
CPU reference) run in the native core on PyTorch's memory; ``torch`` runs PyTorch's own
kernels. The choice is made once per (policy, op, shapes, dtypes, devices) through the
core's dispatcher, recorded once, and looked up in a dict afterwards, so a call costs a
dict lookup, the output allocations and one native launch: the core's kernel is called with
raw pointers and PyTorch's current stream (no DLPack exchange, no string work).

Forward returns the row statistics (``[2, rows]`` mean and rstd for LayerNorm, ``[1, rows]``
rstd for RMSNorm; float32, float64 for float64 inputs) that the backward takes. The residual
form normalises ``s = x + residual`` (rounded to the input dtype) and returns it too; its
backward adds the gradient reaching ``s`` to dx, which is then the gradient of both x and
residual.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xpuruntime.policies import KernelPolicy
from xpuruntime.pytorch import policy
from xpuruntime.pytorch._compat import current_raw_stream
from xpuruntime.pytorch.ops._policy import describe, fall_back
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import (
    InvalidArgumentError,
    XpuRuntimeError,
)
from xpuruntime.runtime.native import core

__all__ = [
    "LAYERNORM",
    "RMSNORM",
    "TORCH",
    "Norm",
    "backward",
    "forward",
    "stats_dtype",
    "torch_forward",
]

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
    width = _width(x, normalized_shape)
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


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
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
    stats = x.new_empty((norm.stats_rows, rows), dtype=stats_dtype(x.dtype)) if keep_stats else None
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


def torch_forward(
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
            wide = source.to(stats_dtype(source.dtype))
            rstd = torch.rsqrt(wide.square().mean(dims, keepdim=True) + eps)
            y = (wide * rstd).to(source.dtype)
            y = y * weight if weight is not None else y
        stats = rstd.reshape(1, -1)
    else:
        y, mean, rstd = torch.ops.aten.native_layer_norm(source, shape, weight, bias, eps)
        stats = torch.stack((mean.reshape(-1), rstd.reshape(-1)))
    return y.contiguous(), total, stats.to(stats_dtype(source.dtype))


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
        wide = stats_dtype(x.dtype)
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
# One call on the chosen kernel.


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
    run = torch_forward if chosen == TORCH else _core_forward
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
