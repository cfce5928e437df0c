"""Bounds of integer policy settings the engines take, checked before anything is built.

An ExecutionPolicy value can be valid as a policy and still beyond what an engine takes:
``num_threads=2**31`` overflows ONNX Runtime's int32 (a TypeError deep in its binding), and
``num_threads=100000`` makes it start that many threads (session creation took over two
minutes; 1024 threads took 26 s on a 2-core machine, 256 threads 2.6 s). The kit refuses such
values with a PolicyValidationError naming the range.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from xpuruntime.policies.errors import PolicyValidationError

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy

__all__ = ["DEFAULT_LIMITS", "check_limits"]

#: More threads than this only cost time: four per CPU, at least 256 (thread pools of every
#: engine are created eagerly, each thread with its own stack).
MAX_THREADS = max(256, 4 * (os.cpu_count() or 1))

DEFAULT_LIMITS: Mapping[str, tuple[int, int]] = {"num_threads": (1, MAX_THREADS)}


def check_limits(
    policy: ExecutionPolicy, limits: Mapping[str, tuple[int, int]], engine: str
) -> None:
    """Raise PolicyValidationError for a setting outside the engine's inclusive bounds."""
    for name, (low, high) in limits.items():
        value = getattr(policy, name, None)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            continue
        if not low <= value <= high:
            raise PolicyValidationError(
                f"{value} is outside the range {engine} takes ({low} to {high} on this "
                f"machine); set a value in that range, or leave it unset for the engine's "
                f"default",
                location=f"execution.{name}",
            )
