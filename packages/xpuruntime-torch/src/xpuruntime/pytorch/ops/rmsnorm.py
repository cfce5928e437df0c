"""``fused_rmsnorm`` and ``fused_add_rmsnorm``: RMS normalisation on the core's kernels or
PyTorch's.

The policy's ``rmsnorm`` entry picks the kernel as for ``layernorm``: ``"xrt"`` (the core's
CUDA kernels for float32/float16/bfloat16 and the CPU reference for float32/float64),
``"cpu"`` (the CPU reference) or ``"torch"`` (``torch.nn.functional.rms_norm``). Backward
runs the core's backward kernel (dx and dweight in one pass, with the forward's rstd) or
PyTorch's ops. Registered as ``torch.ops.xpuruntime.fused_rmsnorm`` / ``fused_add_rmsnorm``
/ ``fused_rmsnorm_backward`` (see :mod:`xpuruntime.pytorch.ops._norms`).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from xpuruntime.pytorch.ops._norm_kernels import RMSNORM
from xpuruntime.pytorch.ops._norms import default_eps, normalized_list, run_norm

__all__ = ["fused_add_rmsnorm", "fused_rmsnorm"]


def fused_rmsnorm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """RMS normalisation over the trailing ``normalized_shape`` dimensions.

    Same arguments and result as ``torch.nn.functional.rms_norm`` (``eps`` defaults to the
    machine epsilon of the input's dtype); the kernel follows the policy's ``rmsnorm`` entry.
    """
    shape = normalized_list(normalized_shape)
    y: Tensor = run_norm(RMSNORM, input, None, shape, weight, None, default_eps(input, eps))[0]
    return y


def fused_add_rmsnorm(
    input: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> tuple[Tensor, Tensor]:
    """``s = input + residual; y = rms_norm(s)`` in one pass; returns ``(y, s)``."""
    shape = normalized_list(normalized_shape)
    outputs = run_norm(RMSNORM, input, residual, shape, weight, None, default_eps(input, eps))
    return outputs[0], outputs[1]
