"""Inputs of any array library, seen through one small interface.

A run accepts numpy arrays, PyTorch tensors, CuPy arrays or any other DLPack producer.
This module tells where a tensor lives (DLPack device), its element type as a numpy name,
and moves it to host memory when an engine needs that, saying whether a copy happened
(the execution record counts host<->device copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# DLPack DLDeviceType values (dlpack.h).
_DL_CPU = 1
_DL_CUDA = 2
_DL_CUDA_HOST = 3
_DL_CUDA_MANAGED = 13
_HOST_DEVICE_TYPES = frozenset({_DL_CPU, _DL_CUDA_HOST})
_CUDA_DEVICE_TYPES = frozenset({_DL_CUDA, _DL_CUDA_MANAGED})


@dataclass(frozen=True)
class Placement:
    """Where a tensor's memory is: ``kind`` "cpu" or "cuda" (or "other"), and device index."""

    kind: str
    index: int = 0

    @property
    def on_device(self) -> bool:
        return self.kind != "cpu"


HOST = Placement("cpu", 0)


def placement(x: Any) -> Placement:
    """The device a tensor lives on, read from its DLPack device (host if it has none)."""
    if isinstance(x, np.ndarray):
        return HOST
    dlpack_device = getattr(x, "__dlpack_device__", None)
    if dlpack_device is None:
        return HOST
    device_type, index = dlpack_device()
    if int(device_type) in _HOST_DEVICE_TYPES:
        return Placement("cpu", int(index))
    if int(device_type) in _CUDA_DEVICE_TYPES:
        return Placement("cuda", int(index))
    return Placement("other", int(index))


def dtype_name(x: Any) -> str:
    """Element type as a numpy-style name ("float32", "int64", "bfloat16" ...)."""
    data_type = getattr(x, "data_type", None)
    if callable(data_type):  # onnxruntime.OrtValue: "tensor(float)"
        return onnx_type_to_numpy_name(str(data_type()))
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return str(np.asarray(x).dtype.name)
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    return str(dtype).removeprefix("torch.")  # torch.dtype has no .name


def shape_of(x: Any) -> tuple[int, ...]:
    """The tensor's shape as a tuple of ints (``OrtValue.shape`` is a method)."""
    shape = x.shape
    if callable(shape):
        shape = shape()
    return tuple(int(d) for d in shape)


def nbytes_of(x: Any) -> int:
    """Size of the tensor's data in bytes."""
    nbytes = getattr(x, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    size = getattr(x, "tensor_size_in_bytes", None)
    if callable(size):
        return int(size())
    count = int(np.prod(shape_of(x), dtype=np.int64))
    element_size = getattr(x, "element_size", None)
    if callable(element_size):  # torch
        return count * int(element_size())
    return count * np.dtype(dtype_name(x)).itemsize


def as_host_array(x: Any) -> tuple[np.ndarray, bool]:
    """``x`` as a numpy array and whether that took a device-to-host copy.

    Host tensors are viewed without copying (DLPack); device tensors are copied by their
    own library (``.cpu()``, ``.get()``, ``.numpy()``) or through DLPack ``copy=True``.
    """
    if isinstance(x, np.ndarray):
        return x, False
    if placement(x).on_device:
        return _device_to_host(x), True
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # torch CPU tensor, possibly with grad
        return x.detach().numpy(), False
    if hasattr(x, "__dlpack__"):
        numpy = getattr(x, "numpy", None)
        if callable(numpy) and hasattr(x, "data_type"):  # OrtValue on the host
            return np.asarray(numpy()), False
        return np.from_dlpack(x), False
    return np.asarray(x), False


def _device_to_host(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch
        return np.asarray(x.detach().cpu().numpy())
    get = getattr(x, "get", None)
    if callable(get):  # cupy
        return np.asarray(get())
    numpy = getattr(x, "numpy", None)
    if callable(numpy):  # onnxruntime.OrtValue
        return np.asarray(numpy())
    return np.from_dlpack(x, device="cpu", copy=True)


_ONNX_TO_NUMPY = {
    "float": "float32",
    "float16": "float16",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "string": "str",
    "float8e4m3fn": "float8_e4m3fn",
    "float8e5m2": "float8_e5m2",
}


def onnx_type_to_numpy_name(onnx_type: str) -> str:
    """``"tensor(float)"`` -> ``"float32"``: ONNX Runtime type strings as numpy names."""
    inner = onnx_type.removeprefix("tensor(").removesuffix(")")
    return _ONNX_TO_NUMPY.get(inner, inner)
