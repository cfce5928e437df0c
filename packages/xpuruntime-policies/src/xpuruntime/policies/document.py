"""Policy documents: the file format shared by training and inference.

A document is a mapping with a ``schema_version`` and up to two sections::

    {"schema_version": 1,
     "kernel": {"strategy": "first_supported", "ops": {"matmul": "cublasLt"}},
     "execution": {"precision": "fp16", "engines": ["tensorrt", "onnxruntime"]}}

Either section may be absent; an absent section means its defaults. The same document
reads and writes as JSON, YAML or TOML, and hashes the same in all three.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from xpuruntime.policies import formats, policy_file
from xpuruntime.policies._struct import PolicyStructMeta
from xpuruntime.policies.conflicts import check_conflicts
from xpuruntime.policies.errors import PolicyConflictError, PolicyValidationError
from xpuruntime.policies.execution_policy import ExecutionPolicy
from xpuruntime.policies.formats import Format
from xpuruntime.policies.kernel_policy import KernelPolicy
from xpuruntime.policies.policy_file import SCHEMA_VERSION, PolicyFile

__all__ = ["SCHEMA_VERSION", "Format", "PolicyDocument", "PolicyFile", "load_policy"]


class PolicyDocument(msgspec.Struct, frozen=True, kw_only=True, metaclass=PolicyStructMeta):
    """A kernel policy and an execution policy kept, diffed and hashed together.

    ``kernel`` / ``execution`` are None when the document has no such section.
    An ExecutionPolicy's own ``kernel_policy`` moves into the ``kernel`` section.
    """

    kernel: KernelPolicy | None = None
    execution: ExecutionPolicy | None = None
    schema_version: ClassVar[int] = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.kernel is not None and not isinstance(self.kernel, KernelPolicy):
            raise PolicyValidationError(
                f"expected a KernelPolicy, got {type(self.kernel).__name__}", location="kernel"
            )
        if self.execution is not None and not isinstance(self.execution, ExecutionPolicy):
            raise PolicyValidationError(
                f"expected an ExecutionPolicy, got {type(self.execution).__name__}",
                location="execution",
            )
        if self.execution is not None and self.execution.kernel_policy is not None:
            attached = self.execution.kernel_policy
            if self.kernel is not None and self.kernel != attached:
                raise PolicyConflictError(
                    "the document's kernel policy and execution.kernel_policy differ;"
                    " give the kernel policy once"
                )
            msgspec.structs.force_setattr(self, "kernel", attached)
            msgspec.structs.force_setattr(
                self, "execution", self.execution.replace(kernel_policy=None)
            )
        elif self.kernel is not None:
            msgspec.structs.force_setattr(self, "kernel", self.kernel.copy())
        if self.execution is not None and self.kernel is not None:
            check_conflicts(self.execution, self.kernel)

    def __hash__(self) -> int:
        # Holds a (mutable) KernelPolicy: hash the canonical form, as ExecutionPolicy does.
        return hash(self.content_hash())

    def kernel_policy(self) -> KernelPolicy:
        """The kernel section as a KernelPolicy (an empty, all-auto one when absent)."""
        return self.kernel.copy() if self.kernel is not None else KernelPolicy()

    def execution_policy(self) -> ExecutionPolicy:
        """The execution section with the kernel section attached as ``kernel_policy``."""
        execution = self.execution if self.execution is not None else ExecutionPolicy()
        return execution.replace(kernel_policy=self.kernel)

    # -- plain data ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The document as plain data: what save() writes and content_hash() hashes."""
        return policy_file.document_data(
            kernel=None if self.kernel is None else self.kernel.to_section(),
            execution=None if self.execution is None else self.execution.to_section(),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> PolicyDocument:
        """Check and read plain data (as parsed from a file); PolicyError if invalid."""
        parsed = policy_file.read(data, source=source)
        try:
            kernel = None if parsed.kernel is None else KernelPolicy.from_section(parsed.kernel)
            execution = None
            if parsed.execution is not None:
                settings = msgspec.structs.asdict(parsed.execution)
                execution = ExecutionPolicy(**settings)
            return cls(kernel=kernel, execution=execution)
        except PolicyValidationError as exc:
            exc.source = exc.source or source
            raise

    # -- text and files --------------------------------------------------------------

    def dumps(self, format: Format = "json") -> str:
        """The document as JSON, YAML or TOML text."""
        return policy_file.dumps(self.to_dict(), format)

    @classmethod
    def loads(cls, text: str, format: Format, *, source: str = "<string>") -> PolicyDocument:
        """Parse and check JSON, YAML or TOML text."""
        data = formats.parse(text, formats.format_of(source, format), source)
        return cls.from_dict(data, source=source)

    def save(self, path: str | Path, *, format: Format | None = None) -> Path:
        """Write to ``path`` (format from its suffix unless given); returns the path."""
        return policy_file.save(self.to_dict(), path, format=format)

    @classmethod
    def load(cls, path: str | Path, *, format: Format | None = None) -> PolicyDocument:
        """Read and check a policy file (format from its suffix unless given)."""
        return load_policy(path, format=format)

    # -- identity --------------------------------------------------------------------

    def canonical_json(self) -> bytes:
        """Sorted-key, whitespace-free UTF-8 JSON of :meth:`to_dict` (every default filled in)."""
        return policy_file.canonical_json(self.to_dict())

    def content_hash(self) -> str:
        """sha256 (hex) of :meth:`canonical_json`: equal for equal policies in any format."""
        return policy_file.content_hash(self.to_dict())


def load_policy(path: str | Path, *, format: Format | None = None) -> PolicyDocument:
    """Read, parse and check a policy file; PolicyError subclasses say what is wrong."""
    data, source = policy_file.read_path(path, format=format)
    return PolicyDocument.from_dict(data, source=source)
