"""When an op call may skip PyTorch's dispatcher: shared by the custom ops' eager fast paths."""

from __future__ import annotations

import torch

from xpuruntime.pytorch._compat import is_compiling

__all__ = ["plain_eager"]

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def plain_eager(*tensors: torch.Tensor | None) -> bool:
    """True for an eager call on plain tensors that nothing intercepts: no compiler or tracer,
    no dispatch or function mode (fake tensors, functionalisation), no functorch transform,
    no tensor subclass. Only then may a call skip PyTorch's dispatcher (two trips into Python
    are most of a Python custom op's host time)."""
    for tensor in tensors:
        if tensor is not None and type(tensor) not in _PLAIN_TENSORS:
            return False
    return not (
        is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._are_functorch_transforms_active()
        or torch._C._get_tracing_state() is not None
    )
