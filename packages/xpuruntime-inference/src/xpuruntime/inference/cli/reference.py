"""The command reference page (``docs/reference/cli.md``), generated from the click commands.

``python -m xpuruntime.inference.cli.reference > docs/reference/cli.md`` writes it; a test
fails when the page and the commands disagree, so the page cannot go stale. (Generated
here rather than by a docs plugin: the docs build reads the sources statically and never
imports the package.)
"""

from __future__ import annotations

import inspect

import click

from xpuruntime.inference.cli import main

_HEADER = """# Command reference

Generated from the commands themselves (`python -m xpuruntime.inference.cli.reference`).
Exit codes: 0 success, 1 a runtime failure, 2 a usage error. `--json` writes JSON to stdout
(no path, or `-`) or to a file. Policy settings: flag > `XPURUNTIME_POLICY_*` > `--policy`
file > defaults.
"""


def render() -> str:
    """The whole page."""
    parts = [_HEADER]
    _command(main, "xpuruntime", parts, level=2, parent=None)
    return "\n".join(parts)


def _command(
    command: click.Command,
    path: str,
    parts: list[str],
    level: int,
    parent: click.Context | None,
) -> None:
    name = path.split()[-1]
    context = click.Context(command, parent=parent, info_name=name, **command.context_settings)
    parts.append(f"{'#' * level} `{path}`\n")
    help_text = inspect.cleandoc(command.help or "")
    if help_text:
        parts.append(help_text + "\n")
    usage = " ".join(command.collect_usage_pieces(context))
    parts.append(f"```\n{path} {usage}\n```\n")
    options = [p for p in command.get_params(context) if isinstance(p, click.Option)]
    if options:
        parts.append("| option | help |\n|---|---|")
        for option in options:
            record = option.get_help_record(context)
            if record is None:
                continue
            names, help_line = (text.replace("|", r"\|") for text in record)
            parts.append(f"| `{names}` | {help_line} |")
        parts.append("")
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None:
                _command(sub, f"{path} {name}", parts, level + 1, context)


if __name__ == "__main__":
    print(render(), end="")
