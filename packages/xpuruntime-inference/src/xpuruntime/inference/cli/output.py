"""How every command writes: rich tables on a terminal (words never broken), plain unwrapped
text elsewhere, JSON where asked (``--json`` to stdout, ``--json-out PATH`` to a file; the
options are shared with ``xpuruntime-policy``)."""

from __future__ import annotations

import io
import sys
from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from xpuruntime.policies.json_output import STDOUT, json_option, write_json

__all__ = ["Output", "human_bytes", "json_option"]

#: Lines are never wrapped when the output is not a terminal (a pipe, a file, a test).
_UNWRAPPED = 1 << 20


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


class _TextTable(Table):
    """A table whose string cells are text, not markup: names hold brackets ("x[0]")."""

    def add_row(self, *cells: RenderableType | None, **kwargs: Any) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)


class Output:
    """Where a command's human-readable output goes, and how it looks there."""

    def __init__(self, json_target: str | None = None) -> None:
        self.json_target = json_target
        self.terminal = sys.stdout.isatty()
        #: False when stdout carries JSON: then human output would corrupt it.
        self.human = json_target != STDOUT

    def print(self, *parts: RenderableType | str) -> None:
        """Print renderables to stdout (a str is plain text), unless stdout holds JSON."""
        if not self.human:
            return
        parts = tuple(Text(p) if isinstance(p, str) else p for p in parts)
        if self.terminal:
            for part in parts:
                if isinstance(part, Table):  # a word too long for its column ends in "…",
                    for column in part.columns:  # never breaks ("CPUExecutionProvid er")
                        column.overflow = "ellipsis"
            Console(file=sys.stdout).print(*parts)
            return
        buffer = io.StringIO()
        console = Console(
            file=buffer, width=_UNWRAPPED, color_system=None, highlight=False, soft_wrap=True
        )
        for part in parts:
            if isinstance(part, Table):  # plain text: no box lines, the title on its own line
                part.box, part.show_edge, part.pad_edge = None, False, False
                if part.title:
                    console.print(f"{part.title}:", markup=False)
                    part.title = None
            console.print(part)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))

    def table(self, title: str | None, *columns: str) -> Table:
        """A table (box lines on a terminal; :meth:`print` makes it plain columns elsewhere)."""
        table = _TextTable(title=title, title_justify="left", box=box.ROUNDED)
        for column in columns:
            table.add_column(column)
        return table

    def emit(self, data: Any) -> None:
        """Write ``data`` (msgspec-encodable) as JSON where ``--json`` asked for it."""
        write_json(data, self.json_target)
