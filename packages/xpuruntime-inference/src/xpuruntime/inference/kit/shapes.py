"""ExecutionPolicy.input_shapes and static_shape against the model's declared inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xpuruntime.inference.settings import add_setting
from xpuruntime.policies.errors import PolicyError

if TYPE_CHECKING:
    from xpuruntime.inference.model_info import ModelInfo
    from xpuruntime.policies import ExecutionPolicy
    from xpuruntime.runtime.record import ExecutionRecord

__all__ = ["free_dimension_overrides", "record_static_shape"]


def free_dimension_overrides(
    input_shapes: Mapping[str, Sequence[int]] | None,
    declared: Mapping[str, Sequence[int | str | None]],
) -> dict[str, int]:
    """Map ``ExecutionPolicy.input_shapes`` onto the model's symbolic dimension names.

    A fixed dimension that disagrees with the policy, an unknown input name or a wrong rank
    is a PolicyError: the policy describes another model. ``declared`` empty (a native
    engine format the kit did not read): nothing is checked here.
    """
    if not input_shapes or not declared:
        return {}
    overrides: dict[str, int] = {}
    for name, shape in input_shapes.items():
        if name not in declared:
            raise PolicyError(
                f"ExecutionPolicy.input_shapes names input {name!r}, but the model's inputs are "
                f"{sorted(declared)}"
            )
        dims = declared[name]
        if len(dims) != len(shape):
            raise PolicyError(
                f"ExecutionPolicy.input_shapes[{name!r}] = {list(shape)} has rank {len(shape)}, "
                f"the model's input has rank {len(dims)} ({list(dims)})"
            )
        for axis, (dim, value) in enumerate(zip(dims, shape, strict=True)):
            # A negative size is an exporter's "dynamic" (paddle2onnx writes -1), as ONNX
            # Runtime reads it: no fixed size to disagree with, and no name to override.
            if isinstance(dim, int) and dim >= 0 and dim != value:
                raise PolicyError(
                    f"ExecutionPolicy.input_shapes[{name!r}] sets dimension {axis} to {value}, "
                    f"but the model fixes it to {dim}"
                )
            if isinstance(dim, str):
                previous = overrides.setdefault(dim, int(value))
                if previous != value:
                    raise PolicyError(
                        f"ExecutionPolicy.input_shapes gives dimension {dim!r} two values: "
                        f"{previous} and {value}"
                    )
    return overrides


def record_static_shape(policy: ExecutionPolicy, info: ModelInfo, record: ExecutionRecord) -> None:
    """``static_shape=True``: honoured when input_shapes fixes every symbolic dimension."""
    if not policy.static_shape:
        return
    symbolic = sorted({d for dims in info.inputs.values() for d in dims if isinstance(d, str)})
    fixed = set()
    for name, shape in (policy.input_shapes or {}).items():
        fixed |= {
            d for d, _ in zip(info.inputs.get(name, ()), shape, strict=False) if isinstance(d, str)
        }
    left = [s for s in symbolic if s not in fixed]
    add_setting(
        record,
        "static_shape",
        True,
        "fixed by input_shapes" if not left else None,
        not left,
        ""
        if not left
        else f"symbolic dimensions {left} stay dynamic: give "
        f"ExecutionPolicy.input_shapes for every input",
    )
