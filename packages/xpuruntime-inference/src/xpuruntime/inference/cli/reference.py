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

## Conventions

**Exit codes**, the same for every command:

| code | meaning |
|---|---|
| 0 | success; for `compare`, `lock diff`, `policy diff` and `bundle verify`: no difference |
| 1 | a runtime failure (the engine refused, a fallback under `fallback="error"`, a file that cannot be written, out of memory), or a difference found (`compare`, `lock diff`, `policy diff`, `bundle verify`; `policy validate` with an invalid file) |
| 2 | a usage error: an unknown flag, name or value (engines, devices, cache kinds, `XPURUNTIME_POLICY_*` variables), an invalid value (a dimension below 1, a negative seed or tolerance), a missing file or folder, an empty or non-ONNX model, a file that is not a lockfile (`--lock`) or a policy (`policy show/diff/hash`), an output path that would overwrite an input or cannot be written |

Errors are one line on stderr (`error: ...`); `--debug` or `XPURUNTIME_DEBUG=1` shows the
traceback instead.

**JSON**: `--json` writes the command's result as JSON to stdout, and then nothing else goes
to stdout. `--json-out PATH` writes it to PATH (`-`: stdout). `--json` takes no value, so
the next word on the line is never taken for a path.

**Outputs never overwrite inputs.** `--json-out`, `run --record`, `run --save-outputs`,
`lock record --lock`, `policy schema -o`, `report`/`timeline`/`kernel-timeline -o` and
`explore --node-data-out` refuse (exit 2, before any work) a path that is one of the
command's inputs or lies inside an input bundle's folder, a folder that is missing or not
writable, or an existing file that is not a previous output of the same kind (JSON, `.npy`
for `--save-outputs`, a report or trace xpuruntime wrote for `-o`).

**Models**: `run`, `explain`, `bench`, `inspect`, `compare`, `report`, `timeline` and
`explore` take an ONNX file or a bundle directory (written by `xpuruntime.pytorch.export`);
a bundle brings its policy and lockfile, and without input flags its reference inputs.

**Policy settings**: flag > `XPURUNTIME_POLICY_*` > `--policy` file (or
`XPURUNTIME_POLICY_FILE`; a bundle's own policy) > defaults; `explain` shows which layer set
each setting.

**Output**: tables with box lines on a terminal; plain, unwrapped columns when piped or
redirected.
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
