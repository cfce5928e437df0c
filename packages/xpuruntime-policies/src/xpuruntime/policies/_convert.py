"""Typed conversion of plain data, with msgspec's errors turned into PolicyValidationErrors.

msgspec reports where a value failed as ``$.a.b[...]`` (dict keys elided) and says what was
expected; this module names the exact setting, the value found, the valid choices and the
closest one, so every message tells the user what to change.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import msgspec

from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import PolicyValidationError, UnknownFieldError

T = TypeVar("T")

_MESSAGE = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>.*)`)?$", re.DOTALL)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MISSING = object()


def convert(
    data: object, target: type[T], *, location: str | None = None, source: str | None = None
) -> T:
    """``msgspec.convert(data, target)`` (strict) raising PolicyValidationError on bad data."""
    try:
        return msgspec.convert(data, target)
    except msgspec.ValidationError as exc:
        raise _translate(exc, data, target, location, source) from None
    except RecursionError:
        raise PolicyValidationError(
            "nested too deeply to be a policy", location=location, source=source
        ) from None
    except UnicodeEncodeError as exc:  # "\ud800" escapes in JSON/YAML make unpaired surrogates
        raise PolicyValidationError(
            f"text that is not valid Unicode ({exc.reason}): write the characters themselves,"
            " not surrogate escapes",
            location=location,
            source=source,
        ) from None


def join_location(*parts: str | None) -> str | None:
    """``join_location("execution", "memory")`` -> ``"execution.memory"``; None when empty."""
    joined = ""
    for part in filter(None, parts):
        part = part.lstrip(".")
        joined += part if not joined or part.startswith("[") else f".{part}"
    return joined or None


def _translate(
    exc: msgspec.ValidationError,
    data: object,
    target: object,
    prefix: str | None,
    source: str | None,
) -> PolicyValidationError:
    match = _MESSAGE.match(str(exc))
    what, raw_path = (match["what"], match["path"] or "") if match else (str(exc), "")
    keys, value, tp = _resolve(raw_path, data, target)
    location = join_location(prefix, format_path(keys))
    cause = exc.__cause__
    if isinstance(cause, PolicyValidationError):  # raised by a __post_init__ while decoding
        cause.location = join_location(location, cause.location) if cause.location else location
        cause.source = cause.source or source
        return cause
    if cause is not None:
        what = f"{what}: {cause}"
    field = re.search(r"field `([^`]*)`", what)
    if what.startswith("Object contains unknown field") and field:
        name = field[1]
        return UnknownFieldError(
            f"unknown setting {name!r}. {choices_hint(name, _field_names(tp))}",
            location=location,
            source=source,
        )
    if what.startswith("Object missing required field") and field:
        name = field[1]
        return PolicyValidationError(
            f"missing required setting {name!r}; add it (see `xpuruntime-policy schema`)",
            location=location,
            source=source,
        )
    if what.startswith("Invalid enum value"):
        choices = [str(choice) for choice in _choices(tp)]
        return PolicyValidationError(
            f"{shown(value)} is not allowed. {choices_hint(str(value), choices)}",
            location=location,
            source=source,
        )
    found = "" if value is _MISSING else f" (found {shown(value)})"
    return PolicyValidationError(what.rstrip(".") + found, location=location, source=source)


def _resolve(raw_path: str, data: object, target: object) -> tuple[list[str | int], object, Any]:
    """Follow msgspec's path through data and type; fill in the dict keys it elides."""
    keys: list[str | int] = []
    value: object = data
    tp: Any = target
    for match in _SEGMENT.finditer(raw_path):
        name, index = match.groups()
        if name is not None:
            keys.append(name)
            value = value.get(name, _MISSING) if isinstance(value, dict) else _MISSING
            tp = _step(tp, name)
        elif index == "...":
            tp = _step(tp, "...")
            key = _failing_key(value, tp)
            keys.append(key if key is not None else "...")
            value = value[key] if key is not None and isinstance(value, dict) else _MISSING
        else:
            keys.append(int(index))
            position = int(index)
            valid = isinstance(value, list) and position < len(value)
            value = value[position] if isinstance(value, list) and valid else _MISSING
            tp = _step(tp, "[]")
    return keys, value, tp


def _failing_key(mapping: object, value_type: Any) -> str | None:
    if not isinstance(mapping, dict) or value_type is None:
        return None
    for key, item in mapping.items():
        try:
            msgspec.convert(item, value_type)
        except (msgspec.ValidationError, TypeError):
            return str(key)
    return None


def union_members(tp: Any) -> Iterator[Any]:
    """The alternatives of a union (or the type itself), with Annotated/NewType unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        yield from union_members(typing.get_args(tp)[0])
    elif origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            yield from union_members(arg)
    else:
        yield tp


def _step(tp: Any, key: str) -> Any:
    """The type found under ``key`` (a field name, ``...`` for a dict value, ``[]`` an item)."""
    for member in union_members(tp):
        origin = typing.get_origin(member)
        if key == "..." and origin is dict:
            return typing.get_args(member)[1]
        if key == "[]" and origin in (list, tuple):
            return typing.get_args(member)[0]
        if isinstance(member, type) and issubclass(member, msgspec.Struct):
            for info in msgspec.structs.fields(member):
                if info.encode_name == key:
                    return info.type
    return None


def _field_names(tp: Any) -> list[str]:
    for member in union_members(tp):
        if isinstance(member, type) and issubclass(member, msgspec.Struct):
            return [info.encode_name for info in msgspec.structs.fields(member)]
    return []


def _choices(tp: Any) -> list[object]:
    found: list[object] = []
    for member in union_members(tp):
        if typing.get_origin(member) is typing.Literal:
            found.extend(typing.get_args(member))
        elif isinstance(member, type) and issubclass(member, enum.Enum):
            found.extend(item.value for item in member)
    return found


def format_path(keys: Iterable[str | int]) -> str:
    """``execution.input_shapes["input.1"][0]``: dotted names, JSON-quoted other keys."""
    text = ""
    for key in keys:
        if isinstance(key, int):
            text += f"[{key}]"
        elif _IDENTIFIER.match(key):
            text += f".{key}"
        else:
            text += f"[{json.dumps(key, ensure_ascii=False)}]"
    # Unpaired surrogates (from "\ud800" escapes) cannot be printed: show them escaped.
    return text.lstrip(".").encode("utf-8", "backslashreplace").decode("utf-8")
