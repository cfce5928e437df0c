"""ONNX for xpuruntime's custom ops, used by :func:`xpuruntime.pytorch.export`.

Each op becomes the standard ONNX it computes: the kernel the policy chose travels in the
lockfile, not in the graph. Built on onnxscript's own translations of
``aten::scaled_dot_product_attention`` and ``aten::layer_norm`` (imported at module level:
the exporter reads the annotations below from this module's globals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from onnxscript.function_libs.torch_lib.ops.core import aten_layer_norm
from onnxscript.function_libs.torch_lib.ops.nn import aten_scaled_dot_product_attention
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat, TReal
from onnxscript.onnx_opset import opset18 as op

__all__ = ["onnx_translations"]

# onnxscript's opset stubs give Constant's result every tensor type, which ConstantOfShape
# (INT64 only) and CastLike's type variables then reject; the graph itself is well typed.
_op: Any = op


def fused_attention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    attn_mask: TFloat | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    kernel: str = "auto",
    mode: str = "auto",
    need_lse: bool = False,
) -> tuple[TFloat, TFloat, TFloat, TFloat]:
    """``xpuruntime::fused_attention`` (inference graphs carry no dropout). The op's other
    three results are what its backward needs; an inference graph has no backward, so they
    are empty tensors."""
    result: TFloat = aten_scaled_dot_product_attention(
        query, key, value, attn_mask, 0.0, is_causal, scale
    )
    empty = _op.CastLike(_op.ConstantOfShape(_op.Constant(value_ints=[0])), query)
    return result, empty, _op.Identity(empty), _op.Identity(empty)


def fused_layernorm(
    input: TReal,
    normalized_shape: Sequence[int],
    weight: TReal | None = None,
    bias: TReal | None = None,
    eps: float = 1e-5,
    kernel: str = "auto",
    mode: str = "auto",
) -> TReal:
    """``xpuruntime::fused_layernorm``."""
    result: TReal = aten_layer_norm(input, normalized_shape, weight, bias, eps)
    return result


def onnx_translations() -> dict[Any, Any]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``."""
    ops = torch.ops.xpuruntime
    return {
        ops.fused_attention.default: fused_attention,
        ops.fused_layernorm.default: fused_layernorm,
    }
