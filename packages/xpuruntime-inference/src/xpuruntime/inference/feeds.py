"""Inputs for a model when the user gives none: random tensors shaped by the model's metadata,
with symbolic dimensions bound by name (``--dim batch=8``), and ``.npy`` files by input name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from xpuruntime.inference.errors import InputError, InputNameError, did_you_mean
from xpuruntime.runtime.engines import TensorInfo


def concrete_shape(info: TensorInfo, dims: Mapping[str, int], default: int = 1) -> tuple[int, ...]:
    """The input's shape with each symbolic or unknown dimension bound (``default`` if unnamed)."""
    shape = []
    for d in info.shape:
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        elif isinstance(d, str) and d in dims:
            shape.append(int(dims[d]))
        else:
            shape.append(default)
    return tuple(shape)


def random_feeds(
    inputs: Sequence[TensorInfo], dims: Mapping[str, int] | None = None, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Reproducible random inputs: uniform [0, 1) floats, small non-negative integers, bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in inputs:
        shape = concrete_shape(info, dims or {})
        try:
            dtype = np.dtype(info.dtype)
        except TypeError as exc:
            raise InputError(
                f"input {info.name!r} has dtype {info.dtype}, which numpy cannot create; "
                f"give it as a .npy file (--input {info.name}=file.npy)"
            ) from exc
        if dtype.kind == "f":
            feeds[info.name] = rng.random(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 8, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            raise InputError(
                f"input {info.name!r} has dtype {info.dtype}; give it as a .npy file "
                f"(--input {info.name}=file.npy)"
            )
    return feeds


def load_feeds(
    inputs: Sequence[TensorInfo],
    files: Mapping[str, Path],
    dims: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """``.npy`` files for the named inputs, random tensors for the others."""
    names = [i.name for i in inputs]
    for name in files:
        if name not in names:
            raise InputNameError(
                f"--input names {name!r}{did_you_mean(name, names)}, but the model's inputs "
                f"are {', '.join(names)}"
            )
    feeds = random_feeds([i for i in inputs if i.name not in files], dims, seed=seed)
    for name, path in files.items():
        feeds[name] = np.load(path, allow_pickle=False)
    return {name: feeds[name] for name in names}
