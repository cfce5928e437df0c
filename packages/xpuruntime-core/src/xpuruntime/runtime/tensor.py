"""Tensors shared with numpy, PyTorch and CuPy through DLPack, without copies.

Views keep their strides both ways (a transpose imports as a transposed view); each op says
which layouts its kernels take and asks for ``.contiguous()`` otherwise. Every size is
checked in the native core: a shape, stride or byte offset whose arithmetic would overflow is
an InvalidArgumentError, never a tensor with a wrapped-around size.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from xpuruntime.runtime.errors import InvalidArgumentError
from xpuruntime.runtime.native import core
from xpuruntime.runtime.streams import StreamLike, stream_handle

__all__ = ["Tensor", "empty", "from_dlpack", "like_input"]


if TYPE_CHECKING:

    class Tensor(Protocol):
        """The native tensor class (``xpuruntime.runtime._core.Tensor``), as seen by type checkers."""

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def strides(self) -> tuple[int, ...]:
            """Strides in elements (DLPack's convention, not numpy's bytes)."""

        @property
        def is_contiguous(self) -> bool: ...
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

    Strided views keep their strides. Raises UnsupportedOperationError for unsupported dtypes
    or devices and InvalidArgumentError for malformed sizes, naming what to do instead.
    """
    tensor: Tensor = core().from_dlpack(obj)
    return tensor


def empty(
    shape: Sequence[int], dtype: str = "float32", device: str = "cpu", stream: StreamLike = None
) -> Tensor:
    """Uninitialised contiguous tensor; CUDA memory comes from the caching pool, ordered on
    ``stream``. InvalidArgumentError for a negative dimension or more than 2^62 bytes."""
    tensor: Tensor = core().empty(_dims(shape), dtype, device, stream_handle(stream))
    return tensor


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _dims(shape: Sequence[int]) -> list[int]:
    """``shape`` as int64 dimensions, or InvalidArgumentError saying which one is not."""
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise InvalidArgumentError(f"shape {list(shape)!r}: dimension {dim!r} is not an int")
        if not _INT64_MIN <= dim <= _INT64_MAX:
            raise InvalidArgumentError(
                f"shape {list(shape)!r}: dimension {dim} does not fit in 64 bits"
            )
        dims.append(dim)
    return dims


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
