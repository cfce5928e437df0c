"""How an op's tensors cross into and out of the native core, per array library.

One :class:`Adapter` per input type, built on first sight and cached, so that an op call
costs a dict lookup here: torch tensors go in as DLPack capsules made by
``torch.utils.dlpack.to_dlpack`` (a C function, not the Python-level ``__dlpack__``) and come
back from a capsule; numpy and CuPy arrays go in as they are (the core calls their C-level
``__dlpack__``) and come back through their ``from_dlpack``. Only libraries already imported
are touched: an input's type implies its module is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Adapter", "adapter"]


class Adapter(NamedTuple):
    #: What the native op takes for an input of this type.
    export: Callable[[Any], Any]
    #: The native result (a Tensor, or a capsule when ``as_capsule``) as this library's type.
    wrap: Callable[[Any], Any]
    #: Whether the native op should return DLPack capsules rather than Tensors.
    as_capsule: bool
    #: The raw cudaStream_t the library would run an op on, for an input of this type.
    stream: Callable[[Any], int]


def _same(obj: Any) -> Any:
    return obj


def _no_stream(obj: Any) -> int:
    return 0


_ADAPTERS: dict[type, Adapter] = {}


def adapter(obj: Any) -> Adapter:
    """The adapter of ``obj``'s type."""
    found = _ADAPTERS.get(type(obj))
    if found is None:
        found = _ADAPTERS[type(obj)] = _build(type(obj))
    return found


def _build(kind: type) -> Adapter:
    library = kind.__module__.partition(".")[0]
    module = sys.modules.get(library)
    if library == "torch" and module is not None:
        return _torch_adapter(module)
    if library == "numpy" and module is not None:
        return Adapter(_same, module.from_dlpack, False, _no_stream)
    if library == "cupy" and module is not None:
        cupy = module
        return Adapter(
            _same, cupy.from_dlpack, False, lambda _: int(cupy.cuda.get_current_stream().ptr)
        )
    return Adapter(_same, _same, False, _no_stream)


def _torch_adapter(torch: Any) -> Adapter:
    dlpack = torch.utils.dlpack
    # torch._C._from_dlpack takes the capsule directly; torch.utils.dlpack.from_dlpack is the
    # public route to it (a Python function that checks for __dlpack__ first).
    from_capsule = getattr(torch._C, "_from_dlpack", dlpack.from_dlpack)
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def stream(tensor: Any) -> int:
        if not tensor.is_cuda:
            return 0
        if raw_stream is not None:
            return int(raw_stream(tensor.get_device()))
        return int(torch.cuda.current_stream(tensor.device).cuda_stream)

    return Adapter(dlpack.to_dlpack, from_capsule, True, stream)
