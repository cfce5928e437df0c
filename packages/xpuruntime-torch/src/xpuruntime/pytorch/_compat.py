"""PyTorch API differences between 2.1 and today, in one place.

Each name says which release brought the API; callers use these instead of probing
``torch`` themselves, so support for an older PyTorch is decided here.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

__all__ = [
    "HAS_CUSTOM_OP",
    "PROFILER_OPTIONS",
    "SDPBackend",
    "autograd_inside_kernel",
    "restrict_sdpa",
]

# The enum torch.nn.attention.SDPBackend (2.3+) re-exports; present since 2.0.
SDPBackend = torch._C._SDPBackend

# torch.library.custom_op / register_autograd / register_fake: PyTorch 2.4+.
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")


# One profiling cycle per torch.profiler.profile here; asking to keep events (2.5+) avoids
# the "clears events at the end of each cycle" warning some releases print for that case.
PROFILER_OPTIONS: dict[str, Any] = (
    {"acc_events": True}
    if "acc_events" in inspect.signature(torch.profiler.profile.__init__).parameters
    else {}
)


def restrict_sdpa(*backends: SDPBackend) -> AbstractContextManager[object]:
    """Allow only ``backends`` for scaled_dot_product_attention inside the block."""
    try:
        from torch.nn.attention import sdpa_kernel  # 2.3+
    except ImportError:
        return torch.backends.cuda.sdp_kernel(
            enable_flash=SDPBackend.FLASH_ATTENTION in backends,
            enable_math=SDPBackend.MATH in backends,
            enable_mem_efficient=SDPBackend.EFFICIENT_ATTENTION in backends,
        )
    return sdpa_kernel(list(backends))


_AUTOGRAD_KEYS = (
    torch._C.DispatchKey.AutogradFunctionality,
    torch._C.DispatchKey.ADInplaceOrView,
)


@contextmanager
def autograd_inside_kernel() -> Iterator[None]:
    """Re-enable autograd inside a custom op's kernel for the block.

    PyTorch runs op kernels below the autograd dispatch keys, so a kernel that recomputes a
    forward to differentiate it (attention backward) would record no graph. This lifts the
    thread-local exclusion for the block and puts it back afterwards.
    """
    previous = [torch._C._dispatch_tls_is_dispatch_key_excluded(key) for key in _AUTOGRAD_KEYS]
    for key in _AUTOGRAD_KEYS:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for key, excluded in zip(_AUTOGRAD_KEYS, previous, strict=True):
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)
