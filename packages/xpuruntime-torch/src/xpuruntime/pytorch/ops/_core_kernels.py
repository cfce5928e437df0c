"""The core's kernels seen from PyTorch: ask its dispatcher, run them on shared memory.

Tensors cross through DLPack in both directions (no copy): the core reads PyTorch's
buffers and hands its output back as a torch tensor viewing the core's memory.
"""

from __future__ import annotations

import functools

from torch import Tensor

import xpuruntime.ops as core_ops
from xpuruntime.policies import KernelPolicy
from xpuruntime.runtime.dispatch import dispatcher
from xpuruntime.runtime.errors import XpuRuntimeError

__all__ = ["layernorm", "layernorm_kernel"]


@functools.cache
def _policy(kernel: str) -> KernelPolicy | None:
    return KernelPolicy(layernorm=kernel) if kernel else None


def _dtype_name(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def layernorm_kernel(x: Tensor, kernel: str) -> tuple[str | None, str]:
    """(core kernel that would normalise ``x``, reason); (None, why not) when none can.

    ``kernel`` is a core kernel name (``"xrt"``, ``"cpu"``) or ``""`` for the core's choice.
    """
    width = x.shape[-1] if x.dim() else 0
    rows = x.numel() // width if width else 0
    try:
        decision = dispatcher.resolve(
            "layernorm", [rows, width], _dtype_name(x), str(x.device), _policy(kernel)
        )
    except XpuRuntimeError as error:
        return None, str(error)
    return decision.kernel, decision.reason


def layernorm(x: Tensor, weight: Tensor, bias: Tensor, eps: float, kernel: str) -> Tensor:
    """The core's layer norm over the last dimension of the 2-D ``x``."""
    # DLPack refuses tensors that require grad; the op's autograd lives outside the kernel.
    output: Tensor = core_ops.layernorm(
        x.detach(), weight.detach(), bias.detach(), eps, policy=_policy(kernel)
    )
    return output  # torch in, torch out: the core wraps its buffer back through DLPack
