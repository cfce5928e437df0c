"""Writing policy-to-engine mappings into the execution record."""

from __future__ import annotations

from typing import Any

from xpuruntime.runtime.record import ExecutionRecord, SettingRecord


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
