"""Policy as code for xpuruntime: which kernel, engine, precision and memory a run uses.

``KernelPolicy`` says which kernel runs each op (pin / prefer / auto); ``ExecutionPolicy``
says how a model or training step runs. Both are checked when built, save to and load from
JSON / YAML / TOML policy documents, hash stably, and diff readably. ``xpuruntime-policy``
(also ``xpuruntime policy``) validates, shows, diffs and hashes policy files.
"""

from __future__ import annotations

import importlib

from xpuruntime.policies.errors import (
    PolicyConflictError,
    PolicyError,
    PolicyFileError,
    PolicyParseError,
    PolicyValidationError,
    SchemaVersionError,
    UnknownEngineError,
    UnknownFieldError,
    UnknownKernelError,
    UnknownOpError,
    XpuRuntimeError,
)

# Importing typing costs ~10 ms; type checkers treat any name TYPE_CHECKING as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from xpuruntime.policies._suggest import choices_hint, closest
    from xpuruntime.policies.conflicts import check_conflicts, find_conflicts
    from xpuruntime.policies.differences import PolicyDiff, diff
    from xpuruntime.policies.document import SCHEMA_VERSION, PolicyDocument, load_policy
    from xpuruntime.policies.execution_policy import CollectivePolicy, ExecutionPolicy, MemoryPolicy
    from xpuruntime.policies.kernel_policy import KernelPolicy, Mode, OpPolicy
    from xpuruntime.policies.layering import LayeredPolicy, layered_policy, resolve_policy
    from xpuruntime.policies.lock import Lockfile, LockfileError, LockfileTamperedError
    from xpuruntime.policies.schema import json_schema
    from xpuruntime.policies.strategy import AutoSelectStrategy, BestPerformance, FirstSupported

# Public name -> defining module. Loaded on first access (PEP 562), so `import
# xpuruntime.policies` costs almost nothing and each name pulls in only what it needs.
_LAZY = {
    # "Did you mean": the one copy, for every member's "not one of the choices" messages.
    "choices_hint": "_suggest",
    "closest": "_suggest",
    "check_conflicts": "conflicts",
    "find_conflicts": "conflicts",
    "PolicyDiff": "differences",
    "diff": "differences",
    "SCHEMA_VERSION": "document",
    "PolicyDocument": "document",
    "load_policy": "document",
    "CollectivePolicy": "execution_policy",
    "ExecutionPolicy": "execution_policy",
    "MemoryPolicy": "execution_policy",
    "KernelPolicy": "kernel_policy",
    "Mode": "kernel_policy",
    "OpPolicy": "kernel_policy",
    "LayeredPolicy": "layering",
    "layered_policy": "layering",
    "resolve_policy": "layering",
    "Lockfile": "lock",
    "LockfileError": "lock",
    "LockfileTamperedError": "lock",
    "json_schema": "schema",
    "AutoSelectStrategy": "strategy",
    "BestPerformance": "strategy",
    "FirstSupported": "strategy",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # single-sourced from the distribution's metadata
        from importlib.metadata import version

        return version("xpuruntime-policies")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "SCHEMA_VERSION",
    "AutoSelectStrategy",
    "BestPerformance",
    "CollectivePolicy",
    "ExecutionPolicy",
    "FirstSupported",
    "KernelPolicy",
    "LayeredPolicy",
    "Lockfile",
    "LockfileError",
    "LockfileTamperedError",
    "MemoryPolicy",
    "Mode",
    "OpPolicy",
    "PolicyConflictError",
    "PolicyDiff",
    "PolicyDocument",
    "PolicyError",
    "PolicyFileError",
    "PolicyParseError",
    "PolicyValidationError",
    "SchemaVersionError",
    "UnknownEngineError",
    "UnknownFieldError",
    "UnknownKernelError",
    "UnknownOpError",
    "XpuRuntimeError",
    "__version__",
    "check_conflicts",
    "choices_hint",
    "closest",
    "diff",
    "find_conflicts",
    "json_schema",
    "layered_policy",
    "load_policy",
    "resolve_policy",
]
