"""A policy file as data: its schema, its version check, its text, its file and its hash.

Below the policy classes and PolicyDocument, which all read and write through it, so a
KernelPolicy or ExecutionPolicy saves and loads a document without building a PolicyDocument
(which holds both).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from xpuruntime.policies import formats
from xpuruntime.policies._convert import convert
from xpuruntime.policies._suggest import shown
from xpuruntime.policies.errors import PolicyError, PolicyValidationError, SchemaVersionError
from xpuruntime.policies.execution_section import ExecutionSection
from xpuruntime.policies.formats import Format
from xpuruntime.policies.kernel_section import KernelSection

#: The document layout this package reads and writes.
SCHEMA_VERSION = 1


class PolicyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Schema of a policy file (what the JSON Schema export describes)."""

    schema_version: Literal[1]
    kernel: KernelSection | None = None
    execution: ExecutionSection | None = None
    #: Where editors find the JSON Schema; accepted and ignored (not part of the hash).
    schema_location: Annotated[
        str | None, Meta(description="JSON Schema of this file, for editors; ignored.")
    ] = msgspec.field(default=None, name="$schema")


def read(data: object, *, source: str | None = None) -> PolicyFile:
    """Plain data (as parsed from a file) checked against the schema; PolicyError if not.

    The sections' values are checked by the policies built from them.
    """
    _check_schema_version(data, source)
    return convert(data, PolicyFile, source=source)


def read_path(path: str | Path, *, format: Format | None = None) -> tuple[Any, str]:
    """The plain data of a policy file (format from its suffix unless given), and its name."""
    target = Path(path)
    fmt = formats.format_of(target, format)
    return formats.parse(formats.read_text(target), fmt, str(target)), str(target)


def document_data(
    *, kernel: dict[str, Any] | None = None, execution: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A document of the given sections as plain data: what is saved and hashed."""
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    if kernel is not None:
        data["kernel"] = kernel
    if execution is not None:
        data["execution"] = execution
    return data


def dumps(data: dict[str, Any], format: Format = "json") -> str:
    """A document's plain data as JSON, YAML or TOML text."""
    return formats.dump(data, formats.format_of("", format))


def save(data: dict[str, Any], path: str | Path, *, format: Format | None = None) -> Path:
    """Write a document to ``path`` (format from its suffix unless given); returns the path."""
    target = Path(path)
    text = dumps(data, formats.format_of(target, format))
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{target}: cannot write: {exc.strerror or exc}") from None
    return target


def canonical_json(data: Mapping[str, Any]) -> bytes:
    """Sorted-key, whitespace-free UTF-8 JSON of a document's plain data."""
    return msgspec.json.encode(data, order="sorted")


def content_hash(data: Mapping[str, Any]) -> str:
    """sha256 (hex) of :func:`canonical_json`: equal for equal policies in any format."""
    import hashlib  # ~3 ms, and only hashing needs it

    return hashlib.sha256(canonical_json(data)).hexdigest()


def _check_schema_version(data: object, source: str | None) -> None:
    if not isinstance(data, Mapping):
        raise PolicyValidationError(
            f"a policy document is a mapping with schema_version, kernel and execution;"
            f" got {type(data).__name__} {shown(data)}",
            source=source,
        )
    version = data.get("schema_version")
    if version is None:
        raise PolicyValidationError(
            f"missing schema_version; add `schema_version: {SCHEMA_VERSION}` at the top level",
            source=source,
        )
    if isinstance(version, int) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        newer = version > SCHEMA_VERSION
        raise SchemaVersionError(
            f"schema_version {version} is not readable here (this xpuruntime-policies reads"
            f" {SCHEMA_VERSION}); "
            + ("upgrade xpuruntime-policies" if newer else "rewrite the file for this version"),
            location="schema_version",
            source=source,
        )
