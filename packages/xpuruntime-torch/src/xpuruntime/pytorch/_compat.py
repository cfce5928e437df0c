"""PyTorch API differences between 2.1 and today, in one place.

Each name says which release brought the API; callers use these instead of probing
``torch`` themselves, so support for an older PyTorch is decided here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import torch

from xpuruntime.pytorch.errors import TorchVersionError

__all__ = [
    "HAS_CUSTOM_OP",
    "HAS_SUBSTITUTE_IN_GRAPH",
    "PROFILER_OPTIONS",
    "SDPBackend",
    "autograd_inside_kernel",
    "current_raw_stream",
    "is_compiling",
    "private_api",
    "restrict_sdpa",
]

#: The PyTorch releases this package is tested with (the distribution's bounds).
TESTED_TORCH = "2.1 to 2.13"


def private_api(owner: Any, name: str, where: str) -> Any:
    """``owner.name``, a private PyTorch API, or TorchVersionError saying it moved.

    Private APIs change between releases without notice; looking them up here turns an
    obscure AttributeError deep in a call into a message that names the API and the fix.
    """
    try:
        return getattr(owner, name)
    except AttributeError:
        raise TorchVersionError(
            f"xpuruntime.pytorch uses {where}.{name}, a private PyTorch API that torch "
            f"{torch.__version__} does not have (tested with torch {TESTED_TORCH}): install a "
            f"tested release (pip install 'torch<2.14') or an xpuruntime that supports this one"
        ) from None


# The enum torch.nn.attention.SDPBackend (2.3+) re-exports; present since 2.0.
if TYPE_CHECKING:
    from torch._C import _SDPBackend as SDPBackend
else:
    SDPBackend = private_api(torch._C, "_SDPBackend", "torch._C")

# torch.library.custom_op / register_autograd / register_fake: PyTorch 2.4+.
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")

# torch.compiler.substitute_in_graph (dynamo traces a Python function where it meets a C
# function): PyTorch 2.5+.
HAS_SUBSTITUTE_IN_GRAPH = hasattr(torch.compiler, "substitute_in_graph")


def _dynamo_is_compiling() -> bool:
    import torch._dynamo  # imported only on PyTorch < 2.3, and only when asked

    return bool(torch._dynamo.is_compiling())


# Whether dynamo is tracing the caller: torch.compiler.is_compiling (2.3+), else dynamo's own.
is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", _dynamo_is_compiling)

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_raw_stream(device_index: int) -> int:
    """The current ``cudaStream_t`` of a CUDA device, as an int.

    CUDA builds of PyTorch expose it without building a Stream object (what compiled code
    uses); ``torch.cuda.current_stream`` is the slower public route.
    """
    if _raw_stream is not None:
        return int(_raw_stream(device_index))
    return int(torch.cuda.current_stream(device_index).cuda_stream)


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
    is_excluded = private_api(torch._C, "_dispatch_tls_is_dispatch_key_excluded", "torch._C")
    set_excluded = private_api(torch._C, "_dispatch_tls_set_dispatch_key_excluded", "torch._C")
    previous = [is_excluded(key) for key in _AUTOGRAD_KEYS]
    for key in _AUTOGRAD_KEYS:
        set_excluded(key, False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for key, excluded in zip(_AUTOGRAD_KEYS, previous, strict=True):
            set_excluded(key, excluded)
