"""``xpuruntime-policy`` (and ``xpuruntime policy``): validate, show, diff, hash policy files.

Exit codes: 0 success; 1 invalid file or differences found; 2 usage error (click's own).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import click

from xpuruntime.policies import vocabulary
from xpuruntime.policies.differences import diff as diff_policies
from xpuruntime.policies.document import PolicyDocument, load_policy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.policies.formats import FORMATS, Format, format_of
from xpuruntime.policies.layering import resolve_policy
from xpuruntime.policies.schema import json_schema

EXIT_INVALID = 1

_policy_file = click.Path(exists=True, dir_okay=False, path_type=Path)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Read/write this format instead of guessing from the file suffix.",
)


def _fail(error: PolicyError) -> NoReturn:
    click.echo(f"error: {error}", err=True)
    sys.exit(EXIT_INVALID)


def _load(path: Path, fmt: Format | None) -> PolicyDocument:
    try:
        return load_policy(path, format=fmt)
    except PolicyError as error:
        _fail(error)


@click.group(name="policy", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xpuruntime-policies", prog_name="xpuruntime-policy")
def policy() -> None:
    """Check, normalize, compare and hash xpuruntime policy files (JSON, YAML, TOML)."""


@policy.command()
@click.argument("files", nargs=-1, required=True, type=_policy_file)
@_format_option
def validate(files: tuple[Path, ...], fmt: Format | None) -> None:
    """Check policy FILES; print each one's content hash, or what is wrong with it."""
    invalid = 0
    for path in files:
        try:
            document = load_policy(path, format=fmt)
        except PolicyError as error:
            click.echo(f"error: {error}", err=True)
            invalid += 1
        else:
            click.echo(f"ok: {path} (sha256 {document.content_hash()})")
    if invalid:
        sys.exit(EXIT_INVALID)


@policy.command()
@click.argument("file", type=_policy_file)
@_format_option
@click.option(
    "--to",
    "output_format",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format (default: the input's).",
)
@click.option(
    "--env",
    "with_env",
    is_flag=True,
    help="Apply XPURUNTIME_POLICY_* environment overrides on top of FILE.",
)
def show(file: Path, fmt: Format | None, output_format: Format | None, with_env: bool) -> None:
    """Print FILE normalized: every setting spelled out, ops sorted, defaults filled in."""
    try:
        load = resolve_policy if with_env else load_policy
        document = load(file, format=fmt)
    except PolicyError as error:
        _fail(error)
    click.echo(document.dumps(output_format or format_of(file, fmt)), nl=False)


@policy.command(name="diff")
@click.argument("old", type=_policy_file)
@click.argument("new", type=_policy_file)
def diff_command(old: Path, new: Path) -> None:
    """Print the settings that differ from OLD to NEW; exit 1 when any do."""
    changes = diff_policies(_load(old, None), _load(new, None))
    click.echo(str(changes))
    if changes:
        sys.exit(EXIT_INVALID)


@policy.command(name="hash")
@click.argument("file", type=_policy_file)
@_format_option
def hash_command(file: Path, fmt: Format | None) -> None:
    """Print FILE's content hash (sha256 of its canonical JSON; same in every format)."""
    click.echo(_load(file, fmt).content_hash())


@policy.command()
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file."
)
def schema(output: Path | None) -> None:
    """Print the JSON Schema of policy files (point your editor at it for completion)."""
    text = json.dumps(json_schema(), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


@policy.command()
@click.argument("op", required=False)
def kernels(op: str | None) -> None:
    """List the ops and kernels a policy may name (of OP only, if given), with the engines
    that honour a pin of each kernel and on which devices, as each installed engine's own
    table says (engines marked * are described by the built-in list instead)."""
    unpublished: dict[str, str] = {}
    try:
        ops = [op] if op else vocabulary.known_ops()
        for name in ops:
            click.echo(f"{name}:")
            for spec in vocabulary.kernels_for(name):
                devices = ",".join(sorted(spec.devices))
                honoured: list[str] = []
                steered: list[str] = []
                for engine, (row, table) in vocabulary.kernel_support(name, spec.name).items():
                    mark = "" if table.published else "*"
                    if not table.published:
                        unpublished[engine] = table.source
                    entry = f"{engine}{mark}({','.join(sorted(row.devices))})"
                    (honoured if row.enforced else steered).append(entry)
                line = f"  {spec.name:<12} devices={devices:<9} engines={','.join(honoured) or '-'}"
                if steered:
                    line += f"  prefer-only={','.join(steered)}"
                if spec.aliases:
                    line += f"  (also: {', '.join(spec.aliases)})"
                click.echo(line)
    except PolicyError as error:
        _fail(error)
    for engine, source in sorted(unpublished.items()):
        click.echo(f"* {engine}: {source}")
    for problem in (*vocabulary.plugin_problems(), *vocabulary.table_problems()):
        click.echo(f"warning: kernel plugin {problem.entry_point}: {problem.reason}", err=True)
