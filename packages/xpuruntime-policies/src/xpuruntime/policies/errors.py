"""Exception roots shared by every xpuruntime distribution.

The root lives here, in the lightest distribution, so that `except XpuRuntimeError`
catches policy, runtime, engine and training errors alike without importing native code.
"""

from __future__ import annotations


class XpuRuntimeError(Exception):
    """Base class of every error xpuruntime raises on purpose."""


class PolicyError(XpuRuntimeError, ValueError):
    """A policy document or policy object is invalid; the message says how to fix it."""


class PolicyFileError(PolicyError):
    """A policy file cannot be read: missing, unreadable, or of an unknown format."""


class PolicyParseError(PolicyError):
    """A policy file is not well-formed JSON, YAML or TOML.

    ``line`` and ``column`` are 1-based and come from the parser; None when it gave none.
    """

    def __init__(
        self, message: str, *, source: str, line: int | None = None, column: int | None = None
    ) -> None:
        where = source if line is None else f"{source}:{line}:{column or 1}"
        super().__init__(f"{where}: {message}")
        self.message = message
        self.source = source
        self.line = line
        self.column = column

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_parse_error, (self.message, self.source, self.line, self.column))


def _rebuild_parse_error(
    message: str, source: str, line: int | None, column: int | None
) -> PolicyParseError:
    return PolicyParseError(message, source=source, line=line, column=column)


class PolicyValidationError(PolicyError):
    """A policy holds a value of the wrong type, out of range, or not among the choices.

    ``location`` is the dotted path of the offending setting (``execution.precision``)
    when known; ``source`` the file or layer it came from.
    """

    def __init__(
        self, message: str, *, location: str | None = None, source: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.source = source

    def __str__(self) -> str:
        prefix = "".join(f"{part}: " for part in (self.source, self.location) if part)
        return prefix + self.message

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, self.location, self.source))


def _rebuild(
    cls: type[PolicyValidationError], message: str, location: str | None, source: str | None
) -> PolicyValidationError:
    return cls(message, location=location, source=source)


class SchemaVersionError(PolicyValidationError):
    """A policy document was written for a schema version this package cannot read."""


class UnknownFieldError(PolicyValidationError, TypeError):
    """A policy names a setting that does not exist (a typo, usually).

    Also a TypeError, as Python raises for an unexpected keyword argument.
    """


class UnknownOpError(PolicyValidationError):
    """A kernel policy names an op that no known backend or plugin provides."""


class UnknownKernelError(PolicyValidationError):
    """A kernel policy names a kernel that does not exist for its op."""


class UnknownEngineError(PolicyValidationError):
    """An execution policy names an engine that is neither built in nor a plugin."""


class PolicyConflictError(PolicyValidationError):
    """Settings are each valid but contradict one another (for example a pinned CUDA
    kernel with ``device="cpu"``)."""
