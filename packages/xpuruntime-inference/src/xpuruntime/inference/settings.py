"""Writing policy-to-engine mappings into the execution record, and sending the settings a
user set but the engine did not honour through the fallback rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpuruntime.runtime.record import ExecutionRecord, SettingRecord

if TYPE_CHECKING:
    from xpuruntime.runtime.decisions import Decisions

__all__ = ["add_setting", "refuse_unhonoured", "set_by"]


def add_setting(
    record: ExecutionRecord,
    name: str,
    requested: Any,
    applied: Any,
    honoured: bool,
    note: str = "",
) -> None:
    """Record that policy setting ``name`` became ``applied`` (``honoured`` or not, and why)."""
    record.settings.append(SettingRecord(name, requested, applied, honoured, note))


def set_by(record: ExecutionRecord, name: str) -> str | None:
    """The policy layer that set execution setting ``name`` (a dotted ``memory.limit_bytes``
    or a whole section such as ``memory``), or None when no layer but the defaults did, or
    when ``name`` is no policy setting (``lock.carry_over.*``, ``cuda_libraries``)."""
    node: Any = record.policy.get("execution")
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    path = f"execution.{name}"
    for key, source in record.policy_sources.items():
        related = key == path or key.startswith(f"{path}.") or path.startswith(f"{key}.")
        if related and source != "default":
            return source
    return None


def refuse_unhonoured(decisions: Decisions, first: int = 0) -> None:
    """Every setting recorded from index ``first`` on that a policy layer set explicitly and
    the engine did not honour goes through the fallback rule once (``error`` raises, ``warn``
    warns and records, ``allow`` records). A setting left at its default that the engine
    ignores stays a not-honoured row: defaults that ask for nothing raise nothing."""
    record = decisions.record
    done = {f.what for f in record.fallbacks}
    for setting in record.settings[first:]:
        what = f"setting {setting.name}"
        if setting.honoured or what in done or setting.name in done:
            continue  # honoured, or its fallback is recorded already (precision's rule)
        source = set_by(record, setting.name)
        if source is None:
            continue
        done.add(what)
        decisions.fallback(
            what=what,
            requested=str(setting.requested),
            chosen=str(setting.applied) if setting.applied is not None else "not applied",
            reason=f"set by {source}; {setting.note or 'the engine did not honour it'}",
        )
