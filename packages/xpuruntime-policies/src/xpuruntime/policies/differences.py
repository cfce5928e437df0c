"""Readable differences between two policies, setting by setting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal, TypeAlias

import msgspec

from xpuruntime.policies._convert import format_path
from xpuruntime.policies.document import PolicyDocument
from xpuruntime.policies.execution_policy import ExecutionPolicy
from xpuruntime.policies.kernel_policy import KernelPolicy

AnyPolicy: TypeAlias = PolicyDocument | KernelPolicy | ExecutionPolicy
_ABSENT = object()


class Change(msgspec.Struct, frozen=True):
    """One setting that differs: ``kind`` is added, removed or changed."""

    path: str
    kind: Literal["added", "removed", "changed"]
    old: Any = None
    new: Any = None

    def __str__(self) -> str:
        if self.kind == "added":
            return f"+ {self.path}: {_show(self.new)}"
        if self.kind == "removed":
            return f"- {self.path}: {_show(self.old)}"
        return f"~ {self.path}: {_show(self.old)} -> {_show(self.new)}"


class PolicyDiff(msgspec.Struct, frozen=True):
    """The changes from policy ``a`` to policy ``b``; falsy when there are none."""

    changes: tuple[Change, ...]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __str__(self) -> str:
        return "\n".join(map(str, self.changes)) if self.changes else "no differences"


def diff(a: AnyPolicy, b: AnyPolicy) -> PolicyDiff:
    """Compare two policies (documents, kernel or execution policies) setting by setting.

    Compares the documents their ``to_dict()`` gives, so two policies differ exactly when
    their content hashes differ. Lines read ``~ path: old -> new``, ``+ path: new``,
    ``- path: old``, sorted by path.
    """
    old = dict(_leaves(_as_document(a).to_dict()))
    new = dict(_leaves(_as_document(b).to_dict()))
    changes: list[Change] = []
    for path in sorted(old.keys() | new.keys()):
        before, after = old.get(path, _ABSENT), new.get(path, _ABSENT)
        if before is _ABSENT:
            changes.append(Change(path, "added", new=after))
        elif after is _ABSENT:
            changes.append(Change(path, "removed", old=before))
        elif before != after or type(before) is not type(after):
            changes.append(Change(path, "changed", old=before, new=after))
    return PolicyDiff(tuple(changes))


def _as_document(policy: AnyPolicy) -> PolicyDocument:
    if isinstance(policy, PolicyDocument):
        return policy
    if isinstance(policy, KernelPolicy):
        return PolicyDocument(kernel=policy)
    return PolicyDocument(execution=policy)


def _leaves(data: Any, keys: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Paths to every non-mapping value (an empty mapping is a leaf of its own)."""
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, (*keys, key))
    else:
        yield format_path(keys), data


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
