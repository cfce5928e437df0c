"""One policy from layers: defaults < file < environment < code.

Environment variables (all optional):

* ``XPURUNTIME_POLICY_FILE``: the base file when no path is given in code.
* ``XPURUNTIME_POLICY_<SETTING>``: an execution setting, e.g. ``XPURUNTIME_POLICY_PRECISION=fp16``,
  ``XPURUNTIME_POLICY_ENGINES=tensorrt,onnxruntime``,
  ``XPURUNTIME_POLICY_MEMORY_LIMIT_BYTES=2147483648``. Booleans read ``1/0/true/false/yes/no/on/off``; lists are comma
  separated; ``input_shapes`` and ``engine_options`` are JSON; an empty value unsets an
  optional setting.
* ``XPURUNTIME_POLICY_KERNEL_STRATEGY``: ``first_supported`` or ``best_performance``.
* ``XPURUNTIME_POLICY_KERNEL_<OP>``: ``cublasLt`` (pin), ``prefer:cublasLt``, or ``auto``.

An unknown ``XPURUNTIME_POLICY_*`` variable is an error, not ignored: a typo must not pass
silently.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.policies._convert import union_members
from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.document import SCHEMA_VERSION, PolicyDocument, load_policy
from xpuruntime.policies.errors import PolicyValidationError, UnknownFieldError
from xpuruntime.policies.execution_policy import SECTION_FIELDS, ExecutionPolicy, MemoryPolicy
from xpuruntime.policies.formats import Format
from xpuruntime.policies.kernel_policy import MODES

ENV_PREFIX = "XPURUNTIME_POLICY_"
FILE_VARIABLE = ENV_PREFIX + "FILE"
_KERNEL_PREFIX = ENV_PREFIX + "KERNEL_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def resolve_policy(
    path: str | Path | None = None,
    *,
    format: Format | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> PolicyDocument:
    """The policy from defaults, a file, the environment and code, later layers winning.

    ``path`` (else ``$XPURUNTIME_POLICY_FILE``, else none) is the base file, read as
    ``format`` (default: by its suffix); ``environ``
    (``os.environ`` by default; pass ``{}`` to ignore the environment) supplies
    ``XPURUNTIME_POLICY_*`` overrides; ``overrides`` is a partial document from code, e.g.
    ``{"execution": {"precision": "fp16"}, "kernel": {"ops": {"matmul": "cublas"}}}``.
    Mappings merge key by key; any other value replaces the one below it. Each layer is
    checked as it is applied, so an error names the layer that caused it.
    """
    env = os.environ if environ is None else environ
    base = path if path is not None else env.get(FILE_VARIABLE) or None
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    if base is not None:
        data = load_policy(base, format=format).to_dict()
    from_env = environment_layer(env)
    if from_env:
        data = merge(data, from_env)
        PolicyDocument.from_dict(data, source=f"environment ({ENV_PREFIX}*)")
    if overrides:
        data = merge(data, overrides)
    return PolicyDocument.from_dict(data, source="overrides" if overrides else None)


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` applied over ``base``: mappings merge recursively, other values replace."""
    merged = dict(base)
    for key, value in override.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = merge(below, value)
        else:
            merged[key] = value
    return merged


def environment_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """The partial document the ``XPURUNTIME_POLICY_*`` variables in ``environ`` describe."""
    settings = _environment_settings()
    execution: dict[str, Any] = {}
    kernel: dict[str, Any] = {}
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == FILE_VARIABLE:
            continue
        raw = environ[name]
        if name == _KERNEL_PREFIX + "STRATEGY":
            kernel["strategy"] = raw
        elif name.startswith(_KERNEL_PREFIX):
            op = name.removeprefix(_KERNEL_PREFIX).lower()
            kernel.setdefault("ops", {})[op] = _op_entry(raw)
        elif name in settings:
            section, setting, tp = settings[name]
            value = _parse_value(raw, tp, name)
            target = execution if section is None else execution.setdefault(section, {})
            target[setting] = value
        else:
            valid = [*settings, FILE_VARIABLE, _KERNEL_PREFIX + "STRATEGY", _KERNEL_PREFIX + "<OP>"]
            raise UnknownFieldError(
                f"unknown environment variable {name}. {choices_hint(name, valid)}",
                source="environment",
            )
    layer: dict[str, Any] = {}
    if execution:
        layer["execution"] = execution
    if kernel:
        layer["kernel"] = kernel
    return layer


def _environment_settings() -> dict[str, tuple[str | None, str, Any]]:
    """Variable name -> (sub-mapping, setting, type) for every execution setting."""
    names: dict[str, tuple[str | None, str, Any]] = {}
    for info in msgspec.structs.fields(ExecutionPolicy):
        if info.name not in SECTION_FIELDS:
            continue
        if info.name == "memory":
            for sub in msgspec.structs.fields(MemoryPolicy):
                names[f"{ENV_PREFIX}MEMORY_{sub.name.upper()}"] = ("memory", sub.name, sub.type)
        else:
            names[ENV_PREFIX + info.name.upper()] = (None, info.name, info.type)
    return names


def _op_entry(raw: str) -> str | dict[str, str]:
    mode, sep, kernel = raw.partition(":")
    if sep and mode in MODES:
        return {"kernel": kernel, "mode": mode}
    return raw


def _parse_value(raw: str, tp: Any, variable: str) -> Any:
    members = list(union_members(tp))
    if raw == "" and type(None) in members:
        return None
    kinds = {typing.get_origin(member) or member for member in members} - {type(None)}
    try:
        if kinds == {bool}:
            lowered = raw.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
            return lowered in _TRUE
        if kinds == {int}:
            return int(raw)
        if kinds == {list}:
            return [item.strip() for item in raw.split(",") if item.strip()]
        if kinds == {dict}:
            return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise PolicyValidationError(
            f"cannot read {shown(raw)}: {exc}", location=variable, source="environment"
        ) from None
    return raw
