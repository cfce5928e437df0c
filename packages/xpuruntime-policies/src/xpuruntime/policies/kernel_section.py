"""The ``kernel`` section of a policy file: one op's policy and the section's schema.

Below KernelPolicy and the policy file, which both read this section.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from xpuruntime.policies._struct import PolicyStructMeta
from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import PolicyValidationError
from xpuruntime.policies.strategy import AutoSelectStrategy

#: ``pin``: this kernel must run, else UnsupportedOperationError. ``prefer``: use it where it
#: supports the call, otherwise fall back (recorded). ``auto``: the strategy chooses.
Mode: TypeAlias = Literal["pin", "prefer", "auto"]
MODES: tuple[Mode, ...] = ("pin", "prefer", "auto")
AUTO = "auto"


class OpPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True, metaclass=PolicyStructMeta):
    """The policy of one op: a kernel and a mode.

    ``OpPolicy(kernel="cublasLt")`` pins, ``OpPolicy(kernel="cublasLt", mode="prefer")``
    prefers, ``OpPolicy(mode="auto")`` lets the strategy choose. In a kernel policy the
    pinned and auto forms are written as the plain strings ``"cublasLt"`` and ``"auto"``.
    """

    kernel: str | None = None
    mode: Mode = "pin"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise PolicyValidationError(
                f"unknown mode {shown(self.mode)}. {choices_hint(str(self.mode), MODES)}"
            )
        if self.kernel is not None and not isinstance(self.kernel, str):
            raise PolicyValidationError(
                f"kernel must be a kernel name (str), got {type(self.kernel).__name__}"
                f" {shown(self.kernel)}"
            )
        if self.mode == AUTO and self.kernel is not None:
            raise PolicyValidationError(
                f"mode 'auto' takes no kernel, got kernel={shown(self.kernel)}:"
                " drop the kernel, or use mode 'pin' or 'prefer' to name one"
            )
        if self.mode != AUTO and self.kernel in (None, AUTO):
            raise PolicyValidationError(
                f"mode {self.mode!r} needs a kernel name, got {shown(self.kernel)}:"
                " name a kernel, or use mode 'auto' to let the dispatcher choose"
            )


class KernelSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ``kernel`` section of a policy file."""

    strategy: AutoSelectStrategy = AutoSelectStrategy.FirstSupported
    ops: dict[str, str | OpPolicy] = msgspec.field(default_factory=dict)
