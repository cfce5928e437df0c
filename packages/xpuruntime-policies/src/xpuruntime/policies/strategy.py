"""How the dispatcher chooses a kernel for an op whose mode is ``auto``."""

from __future__ import annotations

import enum

from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import PolicyValidationError


class AutoSelectStrategy(str, enum.Enum):
    """Auto-selection strategy; serialized by value (``"first_supported"``)."""

    #: The first kernel, in the backend's preference order, that supports the call.
    FirstSupported = "first_supported"
    #: Measure the supported kernels once per (shape, dtype, device) and keep the fastest.
    BestPerformance = "best_performance"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @classmethod
    def parse(cls, value: object) -> AutoSelectStrategy:
        """Accept a member or its serialized name; anything else is a PolicyValidationError."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for member in cls:
                if value in (member.value, member.name):
                    return member
        raise PolicyValidationError(
            f"unknown auto-selection strategy {shown(value)}. "
            + choices_hint(str(value), [member.value for member in cls]),
            location="strategy",
        )


FirstSupported = AutoSelectStrategy.FirstSupported
BestPerformance = AutoSelectStrategy.BestPerformance
