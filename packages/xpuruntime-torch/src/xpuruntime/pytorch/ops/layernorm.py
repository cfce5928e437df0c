"""``fused_layernorm`` and ``fused_add_layernorm``: layer normalisation on the core's kernels
or PyTorch's.

The policy's ``layernorm`` entry picks the kernel: ``"xrt"`` (the core's kernels: CUDA
float32/float16/bfloat16 with float32 statistics, CPU float32/float64) or ``"cpu"`` (the
core's CPU reference) run in xpuruntime's native core on PyTorch's memory; ``"torch"`` runs
PyTorch's own. Without a policy the core's dispatcher picks among its kernels where one
supports the input, and PyTorch serves the rest; the decision record says which ran and why.

Backward runs the same kernel family: the core's backward kernel (dx, dweight, dbias in one
pass over dy and x, with the forward's statistics) or PyTorch's ``native_layer_norm_backward``.
Registered as ``torch.ops.xpuruntime.fused_layernorm`` / ``fused_add_layernorm`` /
``fused_layernorm_backward`` (see :mod:`xpuruntime.pytorch.ops._norms`).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from xpuruntime.pytorch.ops._norm_kernels import LAYERNORM
from xpuruntime.pytorch.ops._norms import normalized_list, run_norm

__all__ = ["fused_add_layernorm", "fused_layernorm"]


def fused_layernorm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation over the trailing ``normalized_shape`` dimensions.

    Same arguments and result as ``torch.nn.functional.layer_norm``; the kernel follows the
    policy's ``layernorm`` entry (``xrt``, ``cpu``, ``torch``).
    """
    shape = normalized_list(normalized_shape)
    y: Tensor = run_norm(LAYERNORM, input, None, shape, weight, bias, float(eps))[0]
    return y


def fused_add_layernorm(
    input: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor]:
    """``s = input + residual; y = layer_norm(s)`` in one pass; returns ``(y, s)``.

    The transformer block's residual step: ``s`` (rounded to the input dtype, which
    ``residual`` must share) is the new residual stream and ``y`` its normalisation.
    """
    shape = normalized_list(normalized_shape)
    y, total = run_norm(LAYERNORM, input, residual, shape, weight, bias, float(eps))[:2]
    return y, total
