"""One policy from layers: defaults < policy (file or object) < environment < arguments.

The same precedence holds everywhere a policy is used (``InferenceSession``, the ``xpuruntime``
and ``xpuruntime-policy`` CLIs, ``xpuruntime.pytorch``): a policy file or an
``ExecutionPolicy`` object is the base; ``XPURUNTIME_POLICY_*`` variables override it, so an
operator can re-target a deployed program without touching its code; explicit keyword
arguments and CLI flags override both. :func:`layered_policy` also says which layer set each
setting, and the execution record carries that (``ExecutionRecord.policy_sources``).

Environment variables (all optional):

* ``XPURUNTIME_POLICY_FILE``: the base file when no path is given in code.
* ``XPURUNTIME_POLICY_<SETTING>``: an execution setting, e.g. ``XPURUNTIME_POLICY_PRECISION=fp16``,
  ``XPURUNTIME_POLICY_ENGINES=tensorrt,onnxruntime``,
  ``XPURUNTIME_POLICY_MEMORY_LIMIT_BYTES=2147483648``,
  ``XPURUNTIME_POLICY_COLLECTIVES_ALGORITHM=ring``. Booleans read ``1/0/true/false/yes/no/on/off``; lists are comma
  separated; ``input_shapes`` and ``engine_options`` are JSON; an empty value unsets an
  optional setting.
* ``XPURUNTIME_POLICY_KERNEL_STRATEGY``: ``first_supported`` or ``best_performance``.
* ``XPURUNTIME_POLICY_KERNEL_<OP>``: ``cublasLt`` (pin), ``prefer:cublasLt``, or ``auto``.

An unknown ``XPURUNTIME_POLICY_*`` variable is an error, not ignored: a typo must not pass
silently.
"""

from __future__ import annotations

import functools
import json
import os
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from xpuruntime.policies._convert import union_members
from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.document import SCHEMA_VERSION, PolicyDocument, load_policy
from xpuruntime.policies.errors import PolicyValidationError, UnknownFieldError
from xpuruntime.policies.execution_policy import NESTED_SECTIONS, SECTION_FIELDS, ExecutionPolicy
from xpuruntime.policies.formats import Format
from xpuruntime.policies.kernel_policy import MODES, KernelPolicy

ENV_PREFIX = "XPURUNTIME_POLICY_"
FILE_VARIABLE = ENV_PREFIX + "FILE"
_KERNEL_PREFIX = ENV_PREFIX + "KERNEL_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Layer names, lowest first, as they appear in :attr:`LayeredPolicy.sources`.
DEFAULT_LAYER = "default"
POLICY_LAYER = "policy"
ENVIRONMENT_LAYER = "environment"
ARGUMENT_LAYER = "argument"


class LayeredPolicy(msgspec.Struct, frozen=True):
    """The effective policy and, for every setting some layer set, which layer that was.

    ``sources`` maps dotted setting paths (``execution.precision``, ``kernel.ops.matmul``) to
    ``"policy"`` (the file or ExecutionPolicy object; ``"policy <path>"`` for a file),
    ``"environment (XPURUNTIME_POLICY_...)"`` or ``"argument"``. Settings no layer set keep
    their defaults and are absent.
    """

    policy: ExecutionPolicy
    sources: dict[str, str]

    def source_of(self, setting: str) -> str:
        """The layer that set ``setting`` (a dotted path), ``"default"`` when none did."""
        return self.sources.get(setting, DEFAULT_LAYER)


def layered_policy(
    base: ExecutionPolicy | PolicyDocument | str | Path | None = None,
    *,
    arguments: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    format: Format | None = None,
) -> LayeredPolicy:
    """The effective ExecutionPolicy: defaults < ``base`` < environment < ``arguments``.

    ``base`` is an ExecutionPolicy or PolicyDocument (code), the path of a policy file, or
    None (then ``$XPURUNTIME_POLICY_FILE``, else the defaults). ``environ`` (``os.environ``
    by default; ``{}`` ignores the environment) supplies ``XPURUNTIME_POLICY_*``; an unknown
    such variable is an UnknownFieldError with a suggestion. ``arguments`` is a partial
    document from explicit arguments or CLI flags, for example ``{"execution": {"device":
    "cuda"}}``. Each layer is checked as it is applied, so an error names its layer.
    """
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    sources: dict[str, str] = {}
    if base is None:
        base = env.get(FILE_VARIABLE) or None
    if isinstance(base, ExecutionPolicy):
        base = PolicyDocument(execution=base)
    if isinstance(base, PolicyDocument):
        data = base.to_dict()
        _note(sources, _non_default_paths(data), POLICY_LAYER)
    elif base is not None:
        data = load_policy(base, format=format).to_dict()
        _note(sources, _non_default_paths(data), f"{POLICY_LAYER} {base}")
    from_env, variables = _environment_layer_with_names(policy_variables(env))
    if from_env:
        data = merge(data, from_env)
        PolicyDocument.from_dict(data, source=f"environment ({ENV_PREFIX}*)")
        for path in _leaf_paths(from_env):
            sources[path] = f"{ENVIRONMENT_LAYER} ({variables[path]})"
    if arguments:
        data = merge(data, arguments)
        _note(sources, _leaf_paths(arguments), ARGUMENT_LAYER)
    document = PolicyDocument.from_dict(data, source="arguments" if arguments else None)
    return LayeredPolicy(document.execution_policy(), sources)


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
    return _environment_layer_with_names(policy_variables(environ))[0]


def _encoded_environ() -> tuple[dict[Any, Any], Any, Any] | None:
    """CPython's table of the encoded variables behind ``os.environ`` (updated in place by
    every change through ``os.environ``), the encoded NUL and ``NUL + ENV_PREFIX``; None
    where this Python keeps no such table."""
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if not isinstance(data, dict) or encode is None:
        return None
    return data, encode("\0"), encode("\0" + ENV_PREFIX)


_ENCODED = _encoded_environ()


def policy_variables(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``XPURUNTIME_POLICY_*`` variables of ``environ``, sorted: all the environment
    layer depends on, so a caller can key a cache on it.

    For ``os.environ`` CPython's encoded table decides first whether anything changed since
    the last call, else whether there is any: decoding every variable of the process (what
    iterating ``os.environ`` does) costs more than the rest of a policy scope.
    """
    global _last_read
    names: list[Any] | None = None
    if environ is os.environ and _ENCODED is not None:
        data, separator, marker = _ENCODED
        # The usual call finds the same variable names as the last one (a copy of the
        # name list compared in C, names by identity first) and rereads only the values
        # of the policy variables among them.
        names = list(data)
        last = _last_read
        if last is not None and last[0] == names:
            keys = last[1]
            if not keys or [data[key] for key in keys] == last[2]:
                return last[3]
        elif marker not in separator + separator.join(names):
            # One search in C over the joined names (a name holds no NUL) answers the
            # usual case, no policy variable, without a Python loop over the environment.
            _last_read = (names, (), [], ())
            return ()
    variables = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIX)))
    if names is not None:  # taken before the variables were: a change in between misses
        keys = tuple(os.environ.encodekey(name) for name, _ in variables)
        values = [os.environ.encodevalue(value) for _, value in variables]
        _last_read = (names, keys, values, variables)
    return variables


# The last read of os.environ's policy variables: (every encoded name, the policy
# variables' encoded names, their encoded values, the variables).
_last_read: tuple[list[Any], tuple[Any, ...], list[Any], tuple[tuple[str, str], ...]] | None = None


#: Environment layers already read, by the variables they were read from. A policy scope
#: layers the environment on every entry; the variables rarely change.
_ENVIRONMENT_LAYERS: dict[tuple[tuple[str, str], ...], tuple[dict[str, Any], dict[str, str]]] = {}
_ENVIRONMENT_LAYERS_KEPT = 32


def _environment_layer_with_names(
    variables: tuple[tuple[str, str], ...],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The environment's partial document and, per dotted setting, the variable that set it
    (the caller must not change either: both are shared by every caller with the same
    variables)."""
    cached = _ENVIRONMENT_LAYERS.get(variables)
    if cached is None:
        cached = _read_environment_layer(variables)
        if len(_ENVIRONMENT_LAYERS) >= _ENVIRONMENT_LAYERS_KEPT:
            _ENVIRONMENT_LAYERS.clear()
        _ENVIRONMENT_LAYERS[variables] = cached
    return cached


def _read_environment_layer(
    variables: tuple[tuple[str, str], ...],
) -> tuple[dict[str, Any], dict[str, str]]:
    settings = _environment_settings()
    names: dict[str, str] = {}
    execution: dict[str, Any] = {}
    kernel: dict[str, Any] = {}
    for name, raw in variables:
        if name == FILE_VARIABLE:
            continue
        if name == _KERNEL_PREFIX + "STRATEGY":
            kernel["strategy"] = raw
            names["kernel.strategy"] = name
        elif name.startswith(_KERNEL_PREFIX):
            op = name.removeprefix(_KERNEL_PREFIX).lower()
            kernel.setdefault("ops", {})[op] = _op_entry(raw)
            names[f"kernel.ops.{op}"] = name
        elif name in settings:
            section, setting, tp = settings[name]
            value = _parse_value(raw, tp, name)
            target = execution if section is None else execution.setdefault(section, {})
            target[setting] = value
            names[".".join(filter(None, ("execution", section, setting)))] = name
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
    return layer, names


@functools.cache
def _environment_settings() -> dict[str, tuple[str | None, str, Any]]:
    """Variable name -> (sub-mapping, setting, type) for every execution setting."""
    names: dict[str, tuple[str | None, str, Any]] = {}
    for info in msgspec.structs.fields(ExecutionPolicy):
        if info.name not in SECTION_FIELDS:
            continue
        nested = NESTED_SECTIONS.get(info.name)
        if nested is not None:
            for sub in msgspec.structs.fields(nested):
                variable = f"{ENV_PREFIX}{info.name.upper()}_{sub.name.upper()}"
                names[variable] = (info.name, sub.name, sub.type)
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


# Settings whose value is a mapping of user-chosen keys: a layer sets them as a whole.
_OPAQUE_MAPPINGS = frozenset({"execution.input_shapes", "execution.engine_options"})


def _leaf_paths(partial: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of the settings a partial document sets (``schema_version`` excluded)."""
    for key, value in partial.items():
        if not prefix and key == "schema_version":
            continue
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and path not in _OPAQUE_MAPPINGS:
            # An empty mapping sets nothing: naming the whole section as set would be false.
            yield from _leaf_paths(value, path)
        else:
            yield path


def _non_default_paths(document: Mapping[str, Any]) -> Iterator[str]:
    """Paths of a full document whose value differs from the defaults' document."""
    defaults = _default_values()
    for path, value in _leaf_values(document):
        if defaults.get(path, _ABSENT) != value:
            yield path


_ABSENT = object()


@functools.cache
def _default_values() -> dict[str, Any]:
    defaults = dict(_leaf_values(PolicyDocument(execution=ExecutionPolicy()).to_dict()))
    defaults.update(_leaf_values(PolicyDocument(kernel=KernelPolicy()).to_dict()))
    return defaults


def _leaf_values(partial: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in partial.items():
        if not prefix and key == "schema_version":
            continue
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value and path not in _OPAQUE_MAPPINGS:
            yield from _leaf_values(value, path)
        else:
            yield path, value


def _note(sources: dict[str, str], paths: Iterator[str], layer: str) -> None:
    for path in paths:
        sources[path] = layer
