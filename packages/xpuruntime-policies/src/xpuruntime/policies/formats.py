"""JSON, YAML and TOML text <-> plain data, with parser errors as PolicyParseError.

The YAML and TOML libraries are imported on first use, so importing xpuruntime.policies
stays light. Duplicate keys are an error in every format (JSON and YAML parsers would
silently keep the last one).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Any, Literal, TypeAlias

from xpuruntime.policies._suggest import choices_hint
from xpuruntime.policies.errors import PolicyFileError, PolicyParseError

Format: TypeAlias = Literal["json", "yaml", "toml"]
FORMATS: tuple[Format, ...] = ("json", "yaml", "toml")
_SUFFIXES: dict[str, Format] = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


def format_of(path: str | Path, explicit: str | None = None) -> Format:
    """The format named by ``explicit``, else by the file suffix."""
    if explicit is not None:
        if explicit not in FORMATS:
            raise PolicyFileError(f"unknown format {explicit!r}. {choices_hint(explicit, FORMATS)}")
        return explicit
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise PolicyFileError(
            f"{path}: cannot tell the format from suffix {suffix or '(none)'!r}; name the file"
            f" {', '.join(sorted(_SUFFIXES))}, or pass the format explicitly"
        )
    return _SUFFIXES[suffix]


def parse(text: str, fmt: Format, source: str) -> Any:
    """Plain data (dicts, lists, scalars) from ``text``; PolicyParseError if malformed."""
    if fmt == "json":
        return _parse_json(text, source)
    if fmt == "yaml":
        return _parse_yaml(text, source)
    return _parse_toml(text, source)


def dump(data: dict[str, Any], fmt: Format) -> str:
    """``data`` as text in ``fmt`` (keys in the order given)."""
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        import yaml

        # The pure-Python dumper everywhere: libyaml's may wrap and quote differently, and
        # the same policy must produce the same file on every machine.
        text: str = yaml.dump(
            data,
            Dumper=_yaml_dumper(),
            sort_keys=False,
            allow_unicode=True,
            default_flow_style=False,
        )
        return text
    import tomli_w

    toml_text: str = tomli_w.dumps(data)
    return toml_text


# YAML folds these inside plain and single-quoted scalars; only double quotes escape them.
_YAML_LINE_BREAKS = frozenset("\x85\u2028\u2029")


@functools.cache
def _yaml_dumper() -> type:
    """PyYAML's SafeDumper, writing strings that hold a Unicode line break double-quoted (its
    default single-quoted form reads back with the break folded into a space)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if _YAML_LINE_BREAKS.intersection(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper


def read_text(path: Path) -> str:
    """The file's text; PolicyFileError / PolicyParseError instead of OSError / bad UTF-8."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PolicyFileError(f"{path}: no such policy file") from None
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyParseError(
            "not UTF-8 text; save the file as UTF-8", source=str(path), line=line, column=column
        ) from None


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise PolicyParseError(
            f"malformed JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno
        ) from None
    except ValueError as exc:  # from the hooks above; json gives no position for them
        raise PolicyParseError(f"malformed JSON: {exc}", source=source) from None
    except RecursionError:
        raise PolicyParseError("malformed JSON: nested too deeply", source=source) from None


@functools.cache
def _yaml_loader() -> type[Any]:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently).

        Pure Python on purpose: libyaml's CSafeLoader recurses in C and crashes the
        interpreter on deeply nested input instead of raising.
        """

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, list | dict):
                    continue  # unhashable: the schema check reports it with its location
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
            result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
            return result

    return StrictLoader


def _parse_yaml(text: str, source: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise PolicyParseError(
            f"malformed YAML: {problem or exc}",
            source=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise PolicyParseError(f"malformed YAML: {exc}", source=source) from None
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        # PyYAML's constructors raise these for impossible dates (2024-02-30), integers
        # past Python's digit limit, unhashable keys and very deep nesting.
        raise PolicyParseError(f"malformed YAML: {exc}", source=source) from None


def _parse_toml(text: str, source: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        raise PolicyParseError(
            "malformed TOML: " + _TOML_POSITION.sub("", message).strip(),
            source=source,
            line=int(position[1]) if position else None,
            column=int(position[2]) if position else None,
        ) from None
    except RecursionError:
        raise PolicyParseError("malformed TOML: nested too deeply", source=source) from None
