"""xpuruntime's PyTorch custom ops, registered with ``torch.library`` (namespace
``xpuruntime``): autograd and fake implementations included, so they work under
``torch.compile`` and pass ``torch.library.opcheck``.

The kernel each op runs comes from the kernel policy in effect (``attention``,
``layernorm``, ``rmsnorm`` and ``linear`` entries) and is recorded as a decision in
:func:`xpuruntime.pytorch.current_record`.
"""

from xpuruntime.pytorch.ops.attention import fused_attention
from xpuruntime.pytorch.ops.layernorm import fused_add_layernorm, fused_layernorm
from xpuruntime.pytorch.ops.linear import fused_linear
from xpuruntime.pytorch.ops.rmsnorm import fused_add_rmsnorm, fused_rmsnorm

__all__ = [
    "fused_add_layernorm",
    "fused_add_rmsnorm",
    "fused_attention",
    "fused_layernorm",
    "fused_linear",
    "fused_rmsnorm",
]
