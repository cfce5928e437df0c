"""Layer and RMS normalisation ops: forward (with the fused residual form) and backward.

Kernels: ``xrt`` (xpuruntime's CUDA kernels; its CPU reference on CPU tensors) and ``cpu``.
Forward calls return the statistics the backward needs (:class:`NormOutput`); backward calls
return :class:`NormGrads`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xpuruntime.ops._calls import note, stream_for
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import policy_choice
from xpuruntime.runtime.native import core
from xpuruntime.runtime.record import ExecutionRecord
from xpuruntime.runtime.streams import StreamLike
from xpuruntime.runtime.tensor import from_dlpack, like_input

__all__ = [
    "NormGrads",
    "NormOutput",
    "add_layernorm",
    "add_rmsnorm",
    "layernorm",
    "layernorm_backward",
    "layernorm_forward",
    "rmsnorm",
    "rmsnorm_backward",
    "rmsnorm_forward",
]


class NormOutput(NamedTuple):
    """What a norm's forward returns: the output, the residual sum, and the row statistics."""

    y: Any
    sum: Any | None  # x + residual, in the residual form
    mean: Any | None  # LayerNorm's per-row mean (float32; float64 for float64 inputs)
    rstd: Any | None  # per-row 1 / sqrt(var + eps) (RMSNorm: 1 / sqrt(mean(x^2) + eps))


class NormGrads(NamedTuple):
    """Gradients of a norm: dx (also the residual's in the residual form), dweight, dbias."""

    dx: Any
    dweight: Any | None
    dbias: Any | None


def layernorm(
    x: Any,
    weight: Any | None = None,
    bias: Any | None = None,
    eps: float = 1e-5,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """Layer normalisation of ``x`` over its last dimension: (x - mean) / sqrt(var + eps) * weight + bias.

    Kernels: ``xrt`` (CUDA float32/float16/bfloat16 with float32 statistics; the CPU
    reference for float32/float64) and ``cpu``. weight and bias are optional.
    """
    return _norm_forward("layernorm", x, None, weight, bias, eps, False, policy, stream, record).y


def rmsnorm(
    x: Any,
    weight: Any | None = None,
    eps: float = 1e-6,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> Any:
    """RMS normalisation of ``x`` over its last dimension: x / sqrt(mean(x^2) + eps) * weight."""
    return _norm_forward("rmsnorm", x, None, weight, None, eps, False, policy, stream, record).y


def add_layernorm(
    x: Any,
    residual: Any,
    weight: Any | None = None,
    bias: Any | None = None,
    eps: float = 1e-5,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> tuple[Any, Any]:
    """``s = x + residual; y = layernorm(s)`` in one pass, returning ``(y, s)``.

    ``s`` is rounded to x's dtype, and ``y`` normalises that rounded sum (what a transformer
    block carries on as its residual stream).
    """
    out = _norm_forward("layernorm", x, residual, weight, bias, eps, False, policy, stream, record)
    return out.y, out.sum


def add_rmsnorm(
    x: Any,
    residual: Any,
    weight: Any | None = None,
    eps: float = 1e-6,
    *,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> tuple[Any, Any]:
    """``s = x + residual; y = rmsnorm(s)`` in one pass, returning ``(y, s)``."""
    out = _norm_forward("rmsnorm", x, residual, weight, None, eps, False, policy, stream, record)
    return out.y, out.sum


def layernorm_forward(
    x: Any,
    weight: Any | None = None,
    bias: Any | None = None,
    eps: float = 1e-5,
    *,
    residual: Any | None = None,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> NormOutput:
    """LayerNorm (of ``x + residual`` when given) returning the statistics the backward takes."""
    return _norm_forward("layernorm", x, residual, weight, bias, eps, True, policy, stream, record)


def rmsnorm_forward(
    x: Any,
    weight: Any | None = None,
    eps: float = 1e-6,
    *,
    residual: Any | None = None,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> NormOutput:
    """RMSNorm (of ``x + residual`` when given) returning ``rstd`` for the backward."""
    return _norm_forward("rmsnorm", x, residual, weight, None, eps, True, policy, stream, record)


def layernorm_backward(
    dy: Any,
    x: Any,
    weight: Any | None,
    mean: Any,
    rstd: Any,
    *,
    dsum: Any | None = None,
    with_dbias: bool = True,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> NormGrads:
    """Gradients of :func:`layernorm_forward` given ``dy``.

    ``x`` is the normalised input (the forward's ``sum`` in the residual form), ``mean`` and
    ``rstd`` the forward's statistics. ``dsum``, the gradient reaching the residual sum from
    elsewhere, is added to dx. dweight is computed when ``weight`` is given, dbias when
    ``with_dbias``.
    """
    return _norm_backward(
        "layernorm", dy, x, weight, mean, rstd, dsum, with_dbias, policy, stream, record
    )


def rmsnorm_backward(
    dy: Any,
    x: Any,
    weight: Any | None,
    rstd: Any,
    *,
    dsum: Any | None = None,
    policy: KernelPolicy | None = None,
    stream: StreamLike = None,
    record: ExecutionRecord | None = None,
) -> NormGrads:
    """Gradients of :func:`rmsnorm_forward` given ``dy`` (see :func:`layernorm_backward`)."""
    return _norm_backward("rmsnorm", dy, x, weight, None, rstd, dsum, False, policy, stream, record)


def _view(value: Any | None) -> Any | None:
    return None if value is None else from_dlpack(value)


def _like(value: Any | None, template: Any) -> Any | None:
    return None if value is None else like_input(value, template)


def _norm_forward(
    norm: str,
    x: Any,
    residual: Any | None,
    weight: Any | None,
    bias: Any | None,
    eps: float,
    keep_stats: bool,
    policy: KernelPolicy | None,
    stream: StreamLike,
    record: ExecutionRecord | None,
) -> NormOutput:
    kernel, mode, strategy = policy_choice(norm, policy)
    y, total, mean, rstd, decision, detail = core().norm_forward(
        norm,
        from_dlpack(x),
        _view(residual),
        _view(weight),
        _view(bias),
        eps,
        keep_stats,
        kernel,
        mode,
        strategy,
        stream_for(x, stream),
    )
    note(decision, detail, record)
    return NormOutput(like_input(y, x), _like(total, x), _like(mean, x), _like(rstd, x))


def _norm_backward(
    norm: str,
    dy: Any,
    x: Any,
    weight: Any | None,
    mean: Any | None,
    rstd: Any,
    dsum: Any | None,
    with_dbias: bool,
    policy: KernelPolicy | None,
    stream: StreamLike,
    record: ExecutionRecord | None,
) -> NormGrads:
    kernel, mode, strategy = policy_choice(norm, policy)
    dx, dweight, dbias, decision, detail = core().norm_backward(
        norm,
        from_dlpack(dy),
        from_dlpack(x),
        _view(weight),
        _view(mean),
        from_dlpack(rstd),
        _view(dsum),
        with_dbias,
        kernel,
        mode,
        strategy,
        stream_for(x, stream),
    )
    note(decision, detail, record)
    return NormGrads(like_input(dx, x), _like(dweight, x), _like(dbias, x))
