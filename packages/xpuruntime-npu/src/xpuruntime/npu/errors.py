"""Typed errors of the NPU engines; each message says what was wrong and what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.errors import UnsupportedOperationError


class UnknownDeviceError(XpuRuntimeError, ValueError):
    """A device name that no installed backend knows; the message lists the devices found."""

    @classmethod
    def for_name(cls, name: str, *, engine: str, known: Iterable[str]) -> UnknownDeviceError:
        choices = sorted(set(known))
        close = difflib.get_close_matches(name, choices, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return cls(
            f"{engine} does not know device {name!r}; devices here: {choices}.{hint} "
            f"Pass one of them as device=..."
        )


class StaticShapeRequiredError(UnsupportedOperationError, ValueError):
    """A model with dynamic dimensions was given to a device that only runs fixed shapes."""


class QuantizedModelRequiredError(UnsupportedOperationError, ValueError):
    """``precision="int8"`` was asked for a float model and no quantized model was given."""
