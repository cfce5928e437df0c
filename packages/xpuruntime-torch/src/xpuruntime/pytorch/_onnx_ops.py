"""ONNX for xpuruntime's custom ops, used by :func:`xpuruntime.pytorch.export`.

Each op becomes the ONNX it computes, in the form :mod:`xpuruntime.pytorch.onnx_forms`
chose from what the installed engines run: a standard op (``Attention``,
``RMSNormalization``, ``LayerNormalization``, ``Gelu``) or a decomposition into basic ops.
The kernel the policy chose travels in the bundle's record, not in the graph. Every node a
translation emits carries the exporter's metadata naming the op call it came from
(``pkg.torch.onnx.fx_node``), which is how the bundle says what each call became.

The ops' results that only their backward uses (attention's log-sum-exp and RNG state, the
norms' statistics) are empty tensors here: an inference graph has no backward. The
functions are traced by the exporter, which reads their annotations from this module's
globals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from onnxscript import ir
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal, TTensor
from onnxscript.onnx_opset import opset18, opset23

from xpuruntime.pytorch.onnx_forms import Forms
from xpuruntime.runtime.errors import UnsupportedOperationError

__all__ = ["onnx_translations"]

# onnxscript's opset stubs give Constant's result every tensor type, which CastLike's type
# variables then reject; the graph itself is well typed.
_op18: Any = opset18
_op23: Any = opset23


def _empty(like: Any) -> Any:
    """An empty tensor of ``like``'s type: a result only the op's backward reads."""
    return _op18.CastLike(_op18.ConstantOfShape(_op18.Constant(value_ints=[0])), like)


def _unsqueeze(x: TTensor, axis: int) -> TTensor:
    out: TTensor = _op18.Unsqueeze(x, _op18.Constant(value_ints=[axis]))
    return out


def _rank(x: Any) -> int:
    """The rank of a traced value (the exporter knows every input's rank)."""
    return len(x.shape)


def _ones_like_last(x: TReal, dims: int) -> TReal:
    """A weight of ones over ``x``'s trailing ``dims`` dimensions (an op called without one)."""
    one = _op18.Constant(value=ir.tensor(1, dtype=x.dtype))
    ones: TReal = _op18.Expand(one, _op18.Shape(x, start=-dims))
    return ones


def _reduce_mean(x: TReal, dims: int) -> TReal:
    axes = _op18.Constant(value_ints=list(range(-dims, 0)))
    mean: TReal = _op18.ReduceMean(x, axes, keepdims=1)
    return mean


def _stash(x: TReal) -> TReal:
    """Statistics in float32 for narrower inputs, as the standard ops' ``stash_type``."""
    widened: TReal = _op18.Cast(x, to=ir.DataType.FLOAT) if x.dtype != ir.DataType.DOUBLE else x
    return widened


# ---------------------------------------------------------------------------------------
# Attention


def _heads(x: Any) -> Any:
    return x.shape[1]


def _attention_unsupported(query: TFloat, key: TFloat, value: TFloat) -> str:
    ranks = {_rank(query), _rank(key), _rank(value)}
    if ranks - {3, 4} or len(ranks) != 1:
        return (
            f"query, key and value of ranks {_rank(query)}, {_rank(key)}, {_rank(value)}; the"
            " ONNX forms take 3-D (batch, seq, dim) or 4-D (batch, heads, seq, dim) inputs of"
            " one rank: reshape them to 4-D before the call"
        )
    return ""


def _dims(x: TTensor, start: int, end: int) -> Any:
    return _op18.Shape(x, start=start, end=end)


def _repeat_heads(x: TFloat, heads: Any) -> TFloat:
    """(batch, kv_heads, seq, dim) -> (batch, heads, seq, dim), each key/value head serving
    ``heads / kv_heads`` consecutive query heads (``repeat_interleave``, as SDPA's GQA)."""
    batch, kv_heads, rest = _dims(x, 0, 1), _dims(x, 1, 2), _dims(x, 2, 4)
    group = _op18.Div(heads, kv_heads)
    expanded = _op18.Expand(_unsqueeze(x, 2), _op18.Concat(batch, kv_heads, group, rest, axis=0))
    out: TFloat = _op18.Reshape(expanded, _op18.Concat(batch, heads, rest, axis=0))
    return out


def _attention_decomposed(query: TFloat, key: TFloat, value: TFloat, attn_mask: TTensor | None,
                          is_causal: bool, scale: float | None, grouped: bool) -> TFloat:  # fmt: skip
    """softmax(q k^T * scale + mask) v in basic ops (4-D inputs)."""
    if grouped:
        heads = _dims(query, 1, 2)
        key, value = _repeat_heads(key, heads), _repeat_heads(value, heads)
    if scale is None:
        head_dim = _op18.CastLike(_dims(query, -1, 4), query)
        factor = _op18.Reciprocal(_op18.Sqrt(head_dim))
    else:
        factor = _op18.CastLike(_op18.Constant(value_float=float(scale)), query)
    scores = _op18.MatMul(_op18.Mul(query, factor), _op18.Transpose(key, perm=[0, 1, 3, 2]))
    minus_inf = _op18.CastLike(_op18.Constant(value_float=-math.inf), query)
    if is_causal:  # -inf above the diagonal of (query seq, key seq): upper-left aligned
        size = _op18.Concat(_dims(query, -2, -1), _dims(key, -2, -1), axis=0)
        blocked = _op18.Expand(minus_inf, size)
        scores = _op18.Add(scores, _op18.Trilu(blocked, _op18.Constant(value_int=1), upper=1))
    if attn_mask is not None:
        if attn_mask.dtype == ir.DataType.BOOL:  # True: attend
            zero = _op18.CastLike(_op18.Constant(value_float=0.0), query)
            attn_mask = _op18.Where(attn_mask, zero, minus_inf)
        scores = _op18.Add(scores, attn_mask)
    out: TFloat = _op18.MatMul(_op18.Softmax(scores, axis=-1), value)
    return out


def _attention(standard: bool) -> Callable[..., Any]:
    def fused_attention(
        query: TFloat,
        key: TFloat,
        value: TFloat,
        attn_mask: TTensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        kernel: str = "auto",
        mode: str = "auto",
        need_lse: bool = False,
    ) -> tuple[TFloat, TFloat, TFloat, TFloat]:
        """``xpuruntime::fused_attention``; inference graphs carry no dropout."""
        problem = _attention_unsupported(query, key, value)
        if problem:
            raise UnsupportedOperationError(f"xpuruntime::fused_attention cannot export: {problem}")
        three_d = _rank(query) == 3
        # Grouped-query attention: fewer key/value heads than query heads (4-D only).
        grouped = not three_d and _heads(key) != _heads(query)
        if three_d:  # one head: (batch, 1, seq, dim), as SDPA reads a 3-D call
            query, key, value = (_unsqueeze(t, 1) for t in (query, key, value))
            if attn_mask is not None and _rank(attn_mask) == 3:
                attn_mask = _unsqueeze(attn_mask, 1)
        if attn_mask is not None and attn_mask.dtype != ir.DataType.BOOL:
            # An additive mask in the scores' type (SDPA takes a float32 one for fp16 too).
            attn_mask = _op18.CastLike(attn_mask, query)
        if standard:
            attributes: dict[str, Any] = {"is_causal": int(is_causal)}
            if scale is not None:
                attributes["scale"] = float(scale)
            # Attention's optional outputs (present key/value, scores) go unused.
            result = _op23.Attention(query, key, value, attn_mask, **attributes)[0]
        else:
            result = _attention_decomposed(query, key, value, attn_mask, is_causal, scale, grouped)
        if three_d:
            result = _op18.Squeeze(result, _op18.Constant(value_ints=[1]))
        empty = _empty(query)
        return result, empty, _op18.Identity(empty), _op18.Identity(empty)

    return fused_attention


# ---------------------------------------------------------------------------------------
# LayerNorm and RMSNorm


def _layernorm(x: TReal, dims: int, weight: TReal | None, bias: TReal | None, eps: float,
               standard: bool) -> TReal:  # fmt: skip
    if weight is None:
        weight = _ones_like_last(x, dims)
    if standard:
        y: TReal = _op18.LayerNormalization(x, weight, bias, axis=-dims, epsilon=eps)[0]
        return y
    wide = _stash(x)
    centred = _op18.Sub(wide, _reduce_mean(wide, dims))
    variance = _reduce_mean(_op18.Mul(centred, centred), dims)
    eps_value = _op18.CastLike(_op18.Constant(value_float=eps), wide)
    normalised = _op18.CastLike(_op18.Div(centred, _op18.Sqrt(_op18.Add(variance, eps_value))), x)
    y = _op18.Mul(normalised, weight)
    return y if bias is None else _op18.Add(y, bias)


def _rmsnorm(x: TReal, dims: int, weight: TReal | None, eps: float, standard: bool) -> TReal:
    if standard:
        scale = weight if weight is not None else _ones_like_last(x, dims)
        y: TReal = _op23.RMSNormalization(x, scale, axis=-dims, epsilon=eps)
        return y
    wide = _stash(x)
    mean_square = _reduce_mean(_op18.Mul(wide, wide), dims)
    eps_value = _op18.CastLike(_op18.Constant(value_float=eps), wide)
    rstd = _op18.Reciprocal(_op18.Sqrt(_op18.Add(mean_square, eps_value)))
    y = _op18.CastLike(_op18.Mul(wide, rstd), x)
    return y if weight is None else _op18.Mul(y, weight)


def _norms(forms: Forms) -> dict[str, Callable[..., Any]]:
    ln, rms = forms.standard("layernorm"), forms.standard("rmsnorm")

    def fused_layernorm(input: TReal, normalized_shape: Sequence[int],
                        weight: TReal | None = None, bias: TReal | None = None,
                        eps: float = 1e-5, kernel: str = "auto",
                        mode: str = "auto") -> tuple[TReal, TReal]:  # fmt: skip
        """``xpuruntime::fused_layernorm`` -> (y, statistics)."""
        y = _layernorm(input, len(normalized_shape), weight, bias, eps, ln)
        return y, _empty(input)

    def fused_add_layernorm(input: TReal, residual: TReal, normalized_shape: Sequence[int],
                            weight: TReal | None = None, bias: TReal | None = None,
                            eps: float = 1e-5, kernel: str = "auto",
                            mode: str = "auto") -> tuple[TReal, TReal, TReal]:  # fmt: skip
        """``xpuruntime::fused_add_layernorm`` -> (y, input + residual, statistics)."""
        total = _op18.Add(input, residual)
        y = _layernorm(total, len(normalized_shape), weight, bias, eps, ln)
        return y, total, _empty(input)

    def fused_rmsnorm(input: TReal, normalized_shape: Sequence[int],
                      weight: TReal | None = None, bias: TReal | None = None,
                      eps: float = 1e-5, kernel: str = "auto",
                      mode: str = "auto") -> tuple[TReal, TReal]:  # fmt: skip
        """``xpuruntime::fused_rmsnorm`` -> (y, statistics); it takes no bias."""
        y = _rmsnorm(input, len(normalized_shape), weight, eps, rms)
        return y, _empty(input)

    def fused_add_rmsnorm(input: TReal, residual: TReal, normalized_shape: Sequence[int],
                          weight: TReal | None = None, bias: TReal | None = None,
                          eps: float = 1e-5, kernel: str = "auto",
                          mode: str = "auto") -> tuple[TReal, TReal, TReal]:  # fmt: skip
        """``xpuruntime::fused_add_rmsnorm`` -> (y, input + residual, statistics)."""
        total = _op18.Add(input, residual)
        y = _rmsnorm(total, len(normalized_shape), weight, eps, rms)
        return y, total, _empty(input)

    return {
        "fused_layernorm": fused_layernorm,
        "fused_add_layernorm": fused_add_layernorm,
        "fused_rmsnorm": fused_rmsnorm,
        "fused_add_rmsnorm": fused_add_rmsnorm,
    }


# ---------------------------------------------------------------------------------------
# Linear

_GELU_C = math.sqrt(2.0 / math.pi)


def _gelu_tanh(z: TFloat, standard: bool) -> TFloat:
    if standard:
        y: TFloat = _op23.Gelu(z, approximate="tanh")
        return y

    def const(value: float) -> Any:
        return _op18.CastLike(_op18.Constant(value_float=value), z)

    cube = _op18.Mul(_op18.Mul(z, z), z)
    inner = _op18.Mul(const(_GELU_C), _op18.Add(z, _op18.Mul(const(0.044715), cube)))
    y = _op18.Mul(_op18.Mul(const(0.5), z), _op18.Add(const(1.0), _op18.Tanh(inner)))
    return y


def _linear(forms: Forms) -> Callable[..., Any]:
    gelu = forms.standard("gelu")

    def fused_linear(input: TFloat, weight: TFloat, bias: TFloat | None = None,
                     activation: str = "none", kernel: str = "auto",
                     mode: str = "auto") -> tuple[TFloat, TFloat]:  # fmt: skip
        """``xpuruntime::fused_linear`` -> (y, the pre-activation for gelu, else empty)."""
        z = _op18.MatMul(input, _op18.Transpose(weight, perm=[1, 0]))
        if bias is not None:
            z = _op18.Add(z, bias)
        if activation == "relu":
            return _op18.Relu(z), _empty(input)
        if activation == "gelu":
            return _gelu_tanh(z, gelu), _op18.Identity(z)
        if activation != "none":
            raise UnsupportedOperationError(
                f"xpuruntime::fused_linear cannot export activation {activation!r}: the op"
                " computes 'none', 'relu' and 'gelu'"
            )
        return z, _empty(input)

    return fused_linear


def onnx_translations(forms: Forms) -> dict[Any, Any]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``, in ``forms``."""
    ops = torch.ops.xpuruntime
    table: dict[Any, Any] = {
        ops.fused_attention.default: _attention(forms.standard("attention")),
        ops.fused_linear.default: _linear(forms),
    }
    for name, translation in _norms(forms).items():
        table[getattr(ops, name).default] = translation
    return table
