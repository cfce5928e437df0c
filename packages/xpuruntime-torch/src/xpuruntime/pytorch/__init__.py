"""xpuruntime for PyTorch training: explicit, verified kernel policy and execution control.

``import xpuruntime.pytorch as xrt_torch`` bypasses the ``xpuruntime`` facade, so the torch
check lives here too and raises the same message the facade does.

PyTorch's switches (preferred BLAS library, SDPA backends, TF32, determinism, cuDNN
benchmark) are process-global: a policy set here, from any thread, applies to the whole
process. :func:`kernel_policy` scopes restore the previous state in a well-defined order
even when threads overlap; see :mod:`xpuruntime.pytorch.policy`.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  (presence check; every module below needs it)
except ImportError as error:
    raise ImportError(
        "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"
    ) from error

from xpuruntime.runtime.abi import member_version

#: The native core ABI this package was written against.
CORE_ABI = 1
__version__ = member_version("xpuruntime-torch", CORE_ABI)

from xpuruntime.pytorch import ops  # noqa: E402
from xpuruntime.pytorch.allocator import (  # noqa: E402
    allocator_stats,
    is_allocator_set,
    reset_allocator,
    set_allocator,
)
from xpuruntime.pytorch.autocast import autocast  # noqa: E402
from xpuruntime.pytorch.explain import explain  # noqa: E402
from xpuruntime.pytorch.export import export  # noqa: E402
from xpuruntime.pytorch.graphs import (  # noqa: E402
    CapturedGraph,
    GraphedStep,
    capture_graph,
    graph_step,
)
from xpuruntime.pytorch.policy import (  # noqa: E402
    clear_kernel_policy,
    current_decisions,
    current_record,
    get_execution_policy,
    get_kernel_policy,
    kernel_policy,
    set_kernel_policy,
)
from xpuruntime.pytorch.profiling import Profile, profile  # noqa: E402

__all__ = [
    "CORE_ABI",
    "CapturedGraph",
    "GraphedStep",
    "Profile",
    "__version__",
    "allocator_stats",
    "autocast",
    "capture_graph",
    "clear_kernel_policy",
    "current_decisions",
    "current_record",
    "explain",
    "export",
    "get_execution_policy",
    "get_kernel_policy",
    "graph_step",
    "is_allocator_set",
    "kernel_policy",
    "ops",
    "profile",
    "reset_allocator",
    "set_allocator",
    "set_kernel_policy",
]
