"""``--json [PATH|-]`` for every xpuruntime command (``xpuruntime`` and ``xpuruntime-policy``).

Given alone or as ``-``, JSON goes to stdout (and the command writes nothing else there);
given a path, to that file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

F = TypeVar("F", bound=Callable[..., Any])

STDOUT = "-"


def json_option(what: str) -> Callable[[F], F]:
    """The ``--json`` option; the command receives ``json_target`` (None, ``"-"`` or a path)."""
    return click.option(
        "--json",
        "json_target",
        is_flag=False,
        flag_value=STDOUT,
        default=None,
        metavar="[PATH|-]",
        help=f"Write {what} as JSON: to stdout with no PATH or '-' (then nothing else goes "
        f"to stdout), else to PATH.",
    )


def write_json(data: Any, target: str | None) -> None:
    """Write ``data`` (anything msgspec encodes) where ``--json`` said; nothing for None."""
    if target is None:
        return
    text = msgspec.json.format(msgspec.json.encode(data), indent=2).decode() + "\n"
    if target == STDOUT:
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")
        click.echo(f"JSON written to {target}", err=True)
