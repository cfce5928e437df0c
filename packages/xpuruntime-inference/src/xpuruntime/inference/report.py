"""Render an ExecutionRecord for people: rich tables of what was asked and what ran."""

from __future__ import annotations

import io
import statistics
from collections import Counter
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from xpuruntime.runtime.record import ExecutionRecord


def _fmt(value: Any) -> Text:
    """A cell as plain text: record strings hold brackets ("xpuruntime[cuda]"), not markup."""
    return Text("—" if value is None or value == "" else str(value))


def _choices(record: ExecutionRecord) -> Table:
    table = Table(title="Choices", title_justify="left", expand=False)
    for column in ("what", "requested", "chosen", "reason"):
        table.add_column(column, overflow="fold")
    for what, choice in (
        ("engine", record.engine),
        ("device", record.device),
        ("precision", record.precision),
    ):
        if choice is not None:
            table.add_row(what, _fmt(choice.requested), _fmt(choice.chosen), _fmt(choice.reason))
    return table


def _policy_sources(record: ExecutionRecord) -> Table:
    """Every execution setting with its value and the layer that set it (flag/argument >
    environment > policy file > default), as ``ExecutionRecord.policy_sources`` says; the
    settings it does not list kept their defaults."""
    table = Table(
        title="Policy sources (argument > environment > policy file > default)",
        title_justify="left",
    )
    for column in ("setting", "value", "set by"):
        table.add_column(column, overflow="fold")
    sources = record.policy_sources
    leaves = _leaf_paths(record.policy.get("execution"), "execution")
    # One row per setting: a leaf under a setting a layer set whole (input_shapes from a
    # command) is that setting's value, not a second row claiming "default".
    paths = set(sources) | {p for p in leaves if not any(p.startswith(f"{s}.") for s in sources)}
    for path in sorted(paths):
        value, source = _setting_value(record.policy, path), sources.get(path, "default")
        if path == "execution.precision" and path not in sources and _precision_unset(record):
            # The precision rule treats an unset precision as "the model's own", which the
            # Choices table says; the policy's fp32 placeholder is no setting of anyone's.
            value = "not set (the model's stored precision)"
        table.add_row(_fmt(path), _fmt(value), _fmt(source))
    return table


def _precision_unset(record: ExecutionRecord) -> bool:
    return record.precision is not None and record.precision.requested is None


def _leaf_paths(node: Any, prefix: str) -> list[str]:
    """Dotted paths of the settings under ``node`` (``execution.memory.pool``)."""
    if not isinstance(node, dict) or not node:
        return [prefix]
    return [p for key, value in node.items() for p in _leaf_paths(value, f"{prefix}.{key}")]


def _setting_value(policy: dict[str, Any], path: str) -> Any:
    """The value at a dotted setting path (``execution.device``) of the record's policy."""
    node: Any = policy
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _settings(record: ExecutionRecord) -> Table:
    table = Table(title="Settings (policy -> engine)", title_justify="left")
    for column in ("setting", "requested", "applied", "honoured", "note"):
        table.add_column(column, overflow="fold")
    for s in record.settings:
        mark = Text("yes", style="green") if s.honoured else Text("NO", style="bold red")
        table.add_row(_fmt(s.name), _fmt(s.requested), _fmt(s.applied), mark, _fmt(s.note))
    return table


def _nodes(record: ExecutionRecord) -> Table:
    """Nodes, with the columns that say something: one requested device goes in the title,
    placement and reason appear when some node ran elsewhere."""
    nodes = record.nodes
    counts = Counter(n.placement for n in nodes if n.placement is not None)
    summary = ", ".join(
        f"{counts[p]} {p}" for p in ("requested", "host_shape", "fallback") if counts[p]
    )
    requested = {n.requested for n in nodes}
    title = f"Nodes ({len(nodes)}{': ' + summary if summary else ''})"
    if len(requested) == 1:
        title += f", requested on {next(iter(requested))}"
    show_placement = any(n.placement not in (None, "requested") or n.reason for n in nodes)
    columns = ["node", "op"]
    columns += ["requested"] if len(requested) > 1 else []
    columns += ["chosen", "precision"]
    columns += ["placement", "why"] if show_placement else []
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for n in nodes:
        chosen = _fmt(n.chosen)
        if n.requested is not None and n.chosen != n.requested:
            chosen.stylize("bold yellow")
        cells = [_fmt(n.name or "<unnamed>"), _fmt(n.op_type)]
        cells += [_fmt(n.requested)] if len(requested) > 1 else []
        cells += [chosen, _fmt(n.precision)]
        if show_placement:
            placement = _fmt(n.placement)
            if n.placement == "fallback":
                placement.stylize("bold yellow")
            cells += [placement, _fmt(n.reason)]
        table.add_row(*cells)
    return table


def _decisions(record: ExecutionRecord) -> Table:
    table = Table(title="Kernel decisions", title_justify="left")
    for column in ("op", "kernel", "mode", "status", "reason"):
        table.add_column(column, overflow="fold")
    for d in record.decisions:  # status: decided now, locked (replayed) or fallen_back
        table.add_row(_fmt(d.op), _fmt(d.kernel), _fmt(d.mode), d.status, _fmt(d.reason))
    return table


def _fallbacks(record: ExecutionRecord) -> Table:
    table = Table(title="Fallbacks", title_justify="left", style="yellow")
    for column in ("what", "requested", "chosen", "mode", "reason"):
        table.add_column(column, overflow="fold")
    for f in record.fallbacks:
        table.add_row(_fmt(f.what), _fmt(f.requested), _fmt(f.chosen), _fmt(f.mode), _fmt(f.reason))
    return table


def _runs(record: ExecutionRecord) -> Table:
    latencies = [r.latency_ms for r in record.runs]
    title = f"Runs ({len(record.runs)})"
    if latencies:
        title += f": median {statistics.median(latencies):.3f} ms, min {min(latencies):.3f} ms"
    table = Table(title=title, title_justify="left")
    for column in ("run", "latency ms", "copies (count, bytes)", "syncs", "I/O binding"):
        table.add_column(column)
    for r in record.runs[-5:]:
        copies = ", ".join(f"{c.direction} {c.count}x {c.bytes} B" for c in r.copies) or "none"
        table.add_row(
            str(r.index),
            f"{r.latency_ms:.3f}",
            copies,
            str(r.syncs),
            "yes" if r.io_binding else "no",
        )
    return table


def renderables(record: ExecutionRecord) -> list[RenderableType]:
    """The record's parts as rich renderables, empty sections left out."""
    parts: list[RenderableType] = [
        Text(f"Execution record ({record.kind}) of {record.model}", style="bold"),
        _choices(record),
    ]
    if record.policy_sources or record.policy:
        parts.append(_policy_sources(record))
    if record.settings:
        parts.append(_settings(record))
    if record.decisions:
        parts.append(_decisions(record))
    if record.nodes:
        parts.append(_nodes(record))
    if record.fallbacks:
        parts.append(_fallbacks(record))
    if record.runs:
        parts.append(_runs(record))
    for kind, entry in record.cache.items():
        if entry.get("enabled") is False:
            parts.append(Text(f"cache {kind}: off ({entry.get('reason', '')})"))
        else:
            parts.append(
                Text(f"cache {kind}: {entry.get('explanation', '')} ({entry.get('path', '')})")
            )
    parts.extend(Text(f"note: {n}") for n in record.notes)
    return parts


def render_text(record: ExecutionRecord, *, width: int = 110) -> str:
    """The record as plain text (no colour codes), for logs and ``sess.explain()``."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(Group(*renderables(record)))
    return buffer.getvalue()
