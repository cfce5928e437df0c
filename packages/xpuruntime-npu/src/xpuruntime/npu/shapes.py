"""Fixing model input shapes for devices that compile one shape (NPUs, QNN)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpuruntime.npu.errors import StaticShapeRequiredError
from xpuruntime.policies._suggest import choices_hint
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.engines import TensorInfo

Shape = tuple[int, ...]


def is_static(shape: Sequence[int | str | None]) -> bool:
    """True when every dimension is a fixed, non-negative int."""
    return all(isinstance(d, int) and d >= 0 for d in shape)


def _example(inputs: Sequence[TensorInfo]) -> str:
    """An ``input_shapes`` literal the user can start from (dynamic dims shown as 1)."""
    parts = []
    for info in inputs:
        dims = [d if isinstance(d, int) and d >= 0 else 1 for d in info.shape]
        parts.append(f"{info.name!r}: {dims}")
    return "{" + ", ".join(parts) + "}"


def _check_given(info: TensorInfo, given: Sequence[int]) -> Shape:
    """Validate a user-given shape against the model's declared one."""
    if len(given) != len(info.shape):
        raise PolicyError(
            f"input_shapes[{info.name!r}] = {list(given)} has rank {len(given)}, but the model "
            f"input {info.name!r} has rank {len(info.shape)} (shape {list(info.shape)})."
        )
    for axis, (want, model_dim) in enumerate(zip(given, info.shape, strict=True)):
        if not isinstance(want, int) or want <= 0:
            raise PolicyError(
                f"input_shapes[{info.name!r}][{axis}] = {want!r}: dimensions must be positive ints."
            )
        if isinstance(model_dim, int) and model_dim >= 0 and model_dim != want:
            raise PolicyError(
                f"input_shapes[{info.name!r}][{axis}] = {want}, but the model fixes that "
                f"dimension to {model_dim}; use {model_dim} there."
            )
    return tuple(given)


def fixed_input_shapes(
    inputs: Sequence[TensorInfo],
    input_shapes: Mapping[str, Sequence[int]] | None,
    *,
    static_shape: bool,
    device: str,
    device_needs_static: bool,
) -> dict[str, Shape] | None:
    """The fixed shape of every input, or None when the model may stay dynamic.

    Shapes come from ``input_shapes`` first, then from the model's own concrete dims. A
    dynamic dim left over is an error when ``static_shape`` is set or the device needs it.
    """
    given = dict(input_shapes or {})
    names = [info.name for info in inputs]
    for name in given:
        if name not in names:
            raise PolicyError(
                f"input_shapes names {name!r}, which is not a model input. "
                f"{choices_hint(name, names)}"
            )
    if not (static_shape or device_needs_static or given):
        return None
    shapes: dict[str, Shape] = {}
    dynamic: list[TensorInfo] = []
    for info in inputs:
        if info.name in given:
            shapes[info.name] = _check_given(info, given[info.name])
        elif is_static(info.shape):
            shapes[info.name] = tuple(int(d) for d in info.shape if isinstance(d, int))
        else:
            dynamic.append(info)
    if not dynamic:
        return shapes
    if not (static_shape or device_needs_static):
        return shapes or None  # only the inputs the user fixed; the rest stay dynamic
    listed = ", ".join(f"{i.name!r} {list(i.shape)}" for i in dynamic)
    why = (
        f"{device} runs fixed shapes only"
        if device_needs_static and not static_shape
        else "static_shape=True asks for fixed shapes"
    )
    raise StaticShapeRequiredError(
        f"{why}, but these model inputs have dynamic dimensions: {listed}. Give every one a "
        f"shape: ExecutionPolicy(static_shape=True, input_shapes={_example(inputs)})."
    )
