"""Typed errors of the NPU engines; each message says what was wrong and what to do."""

from __future__ import annotations

from collections.abc import Iterable

from xpuruntime.inference.errors import DeviceNotFoundError
from xpuruntime.policies._suggest import choices_hint
from xpuruntime.runtime.errors import UnsupportedOperationError


def unknown_device(name: str, *, engine: str, known: Iterable[str]) -> DeviceNotFoundError:
    """The error for a device name the backend does not know, listing the ones it does."""
    choices = sorted(set(known))
    return DeviceNotFoundError(
        f"{engine} does not know device {name!r}; devices here: {choices}. Pass one of them "
        f"as device=... {choices_hint(name, choices)}"
    )


class StaticShapeRequiredError(UnsupportedOperationError, ValueError):
    """A model with dynamic dimensions was given to a device that only runs fixed shapes."""


class QuantizedModelRequiredError(UnsupportedOperationError, ValueError):
    """``precision="int8"`` was asked for a float model and no quantized model was given."""
