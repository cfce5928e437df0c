"""Tensors shared with numpy, PyTorch and CuPy through DLPack, without copies."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from xpuruntime.runtime.native import core
from xpuruntime.runtime.streams import StreamLike, stream_handle

__all__ = ["Tensor", "empty", "from_dlpack", "like_input"]


if TYPE_CHECKING:

    class Tensor(Protocol):
        """The native tensor class (``xpuruntime.runtime._core.Tensor``), as seen by type checkers."""

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def dtype(self) -> str: ...
        @property
        def device(self) -> str: ...
        @property
        def data_ptr(self) -> int: ...
        @property
        def nbytes(self) -> int: ...
        @property
        def numel(self) -> int: ...
        @property
        def is_pinned(self) -> bool: ...
        def __dlpack__(
            self,
            *,
            stream: int | None = None,
            max_version: tuple[int, int] | None = None,
            dl_device: tuple[int, int] | None = None,
            copy: bool | None = None,
        ) -> Any: ...
        def __dlpack_device__(self) -> tuple[int, int]: ...

else:
    Tensor = core().Tensor


def from_dlpack(obj: Any) -> Tensor:
    """A zero-copy :class:`Tensor` view of ``obj`` (anything with ``__dlpack__``, or a capsule).

    Raises UnsupportedOperationError for non-contiguous tensors and unsupported dtypes or
    devices, naming what to do instead.
    """
    tensor: Tensor = core().from_dlpack(obj)
    return tensor


def empty(
    shape: Sequence[int], dtype: str = "float32", device: str = "cpu", stream: StreamLike = None
) -> Tensor:
    """Uninitialised tensor; CUDA memory comes from the caching pool, ordered on ``stream``."""
    tensor: Tensor = core().empty(list(shape), dtype, device, stream_handle(stream))
    return tensor


def like_input(result: Any, template: Any) -> Any:
    """``result`` (a Tensor) as the array type of ``template`` (numpy/torch/cupy), zero copy.

    Only libraries already imported are touched: ``template``'s type implies its module is.
    """
    library = type(template).__module__.partition(".")[0]
    module = sys.modules.get(library)
    if library == "numpy" and module is not None:
        return module.from_dlpack(result)
    if library == "torch" and module is not None:
        return module.from_dlpack(result)
    if library == "cupy" and module is not None:
        return module.from_dlpack(result)
    return result
