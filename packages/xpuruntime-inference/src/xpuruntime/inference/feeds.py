"""Inputs for a model from the command line: ``.npy`` files by input name, random tensors for
the others, shaped by ``--input-shapes name:1x3x224x224`` (the convention of trtexec and
Polygraphy), ``--dim batch=8`` (a symbolic dimension by name) and the files' own shapes.

Nothing is guessed: an unknown input or dimension name, a shape that contradicts the model,
or a dynamic dimension nothing binds is an error that lists what the model has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from xpuruntime.inference.errors import InputError, InputNameError, InputShapeError, did_you_mean
from xpuruntime.runtime.engines import TensorInfo

Shape = tuple[int, ...]
_DIMS = re.compile(r"^(?:\[\s*(?P<list>[0-9,\s]*)\]|(?P<x>[0-9]+(?:x[0-9]+)*)|)$")


def describe_inputs(inputs: Sequence[TensorInfo]) -> str:
    """``input[batch, 3, 224, 224] float32, mask[batch, ?] bool`` (``?`` = unnamed dynamic)."""
    return ", ".join(
        f"{i.name}[{', '.join('?' if d is None else str(d) for d in i.shape)}] {i.dtype}"
        for i in inputs
    )


def parse_input_shapes(values: Sequence[str]) -> dict[str, Shape]:
    """``["x:1x3x224x224,mask:1x77", "y:[2,4]"]`` -> ``{"x": (1, 3, 224, 224), ...}``.

    A name may itself contain ``:`` (``input:0``, as TensorFlow exports write): the shape is
    after the last one. ``name:[]`` or ``name:`` is a scalar.
    """
    shapes: dict[str, Shape] = {}
    for value in values:
        for item in _split_items(value):
            name, sep, dims = item.rpartition(":")
            match = _DIMS.match(dims.strip())
            if not sep or not name or match is None:
                raise InputShapeError(
                    f"--input-shapes expects NAME:DIMS such as image:1x3x224x224 or "
                    f"image:[1,3,224,224], got {item!r}"
                )
            text = match["list"] if match["list"] is not None else (match["x"] or "")
            shapes[name] = tuple(int(d) for d in re.split(r"[x,\s]+", text) if d)
    return shapes


def _split_items(value: str) -> list[str]:
    """Split on commas outside brackets (``a:[1,2],b:3x4`` is two items)."""
    items, depth, current = [], 0, ""
    for char in value:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def parse_dims(values: Sequence[str]) -> dict[str, int]:
    """``["batch=8", "seq=128"]`` -> ``{"batch": 8, "seq": 128}``."""
    dims = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not name or not number.strip().isdigit():
            raise InputShapeError(f"--dim expects NAME=INT such as batch=8, got {value!r}")
        dims[name.strip()] = int(number)
    return dims


def load_arrays(files: Mapping[str, Path]) -> dict[str, np.ndarray]:
    """The ``.npy`` files, each read without pickles; a missing or bad file says which."""
    arrays = {}
    for name, path in files.items():
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise InputError(
                f"--input {name}={path}: the file does not exist"
                f"{'' if path.is_absolute() else f' (relative to {Path.cwd()})'}"
            ) from None
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(
                f"--input {name}={path}: not a readable .npy file ({exc}); write it with numpy.save"
            ) from None
    return arrays


def build_feeds(
    inputs: Sequence[TensorInfo],
    *,
    files: Mapping[str, Path] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Feeds for every input: the named ``.npy`` files, random tensors for the others.

    Random tensors take ``shapes[name]``, else the model's shape with each symbolic dimension
    bound by ``dims``, by ``shapes`` of other inputs, or by the files' shapes.
    """
    files, shapes, dims = dict(files or {}), dict(shapes or {}), dict(dims or {})
    by_name = {i.name: i for i in inputs}
    _check_input_names("--input", files, by_name)
    _check_input_names("--input-shapes", shapes, by_name)
    symbols = {d for i in inputs for d in i.shape if isinstance(d, str)}
    for name in dims:
        if name not in symbols:
            raise InputNameError(
                f"--dim names {name!r}{did_you_mean(name, symbols)}, but the model's symbolic "
                f"dimensions are {', '.join(sorted(symbols)) or '(none: every dimension is fixed)'}"
                f"; the model's inputs: {describe_inputs(inputs)}"
            )
    arrays = load_arrays(files)
    bound = dict(dims)
    for name, given in shapes.items():
        _bind(by_name[name], tuple(given), bound, "--input-shapes")
    for name, array in arrays.items():
        if len(array.shape) == len(by_name[name].shape):  # a wrong rank: the engine says so
            _bind(by_name[name], array.shape, bound, f"--input {name}", check=False)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    unresolved = []
    for info in inputs:
        if info.name in arrays:
            feeds[info.name] = arrays[info.name]
            continue
        shape = tuple(shapes[info.name]) if info.name in shapes else _resolve(info, bound)
        if shape is None:
            unresolved.append(info)
            continue
        feeds[info.name] = _random(info, shape, rng)
    if unresolved:
        raise InputShapeError(_unresolved_message(unresolved, inputs))
    return feeds


def _check_input_names(
    flag: str, given: Mapping[str, object], by_name: Mapping[str, object]
) -> None:
    for name in given:
        if name not in by_name:
            raise InputNameError(
                f"{flag} names {name!r}{did_you_mean(name, by_name)}, but the model's inputs "
                f"are {', '.join(by_name)}"
            )


def _bind(
    info: TensorInfo,
    shape: Shape,
    bound: dict[str, int],
    flag: str,
    *,
    check: bool = True,
) -> None:
    """Bind the symbols of ``info`` from a concrete ``shape``; a size contradicting a fixed
    dimension is an error (``check``: the engine would refuse it less clearly)."""
    if len(shape) != len(info.shape):
        raise InputShapeError(
            f"{flag} gives {info.name!r} rank {len(shape)} {list(shape)}, the model's input has "
            f"rank {len(info.shape)}: {describe_inputs([info])}"
        )
    for axis, (declared, value) in enumerate(zip(info.shape, shape, strict=True)):
        if isinstance(declared, int) and declared >= 0 and declared != value and check:
            raise InputShapeError(
                f"{flag} sets dimension {axis} of {info.name!r} to {value}, but the model fixes "
                f"it to {declared}: {describe_inputs([info])}"
            )
        if isinstance(declared, str):
            # The first binding derives the other inputs' shapes. Two given sizes of one name
            # are not refused: engines do not hold exporters to their names (paddle2onnx calls
            # every unknown dimension '?', and ONNX Runtime runs 48x192 for ['?', '?']).
            bound.setdefault(declared, int(value))


def _resolve(info: TensorInfo, bound: Mapping[str, int]) -> Shape | None:
    shape = []
    for d in info.shape:
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        elif isinstance(d, str) and d in bound:
            shape.append(bound[d])
        else:
            return None
    return tuple(shape)


def _unresolved_message(unresolved: Sequence[TensorInfo], inputs: Sequence[TensorInfo]) -> str:
    names = sorted({d for i in unresolved for d in i.shape if isinstance(d, str)})
    example = unresolved[0]
    shape = "x".join(str(d) if isinstance(d, int) and d >= 0 else "1" for d in example.shape)
    hint = f"--input-shapes {example.name}:{shape}"
    if names:
        hint += " or " + " ".join(f"--dim {n}=N" for n in names)
    return (
        f"dynamic dimensions of {', '.join(describe_inputs([i]) for i in unresolved)} are not "
        f"bound; give {hint} (the model's inputs: {describe_inputs(inputs)})"
    )


def _random(info: TensorInfo, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """Reproducible random input: uniform [0, 1) floats, small non-negative integers, bools."""
    try:
        dtype = np.dtype(info.dtype)
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(
        f"input {info.name!r} has dtype {info.dtype}, which has no random generator here; "
        f"give it as a .npy file (--input {info.name}=file.npy)"
    )
