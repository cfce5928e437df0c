"""``xpuruntime-policy`` (and ``xpuruntime policy``): validate, show, diff, hash policy files.

Exit codes: 0 success; 1 ``validate`` found an invalid file, or ``diff`` found differences;
2 a usage error: an unknown flag or name, or an input file that cannot be read as a policy
(``show``, ``diff`` and ``hash`` cannot do their work, which CI must tell from "differ").
Errors are one line on stderr (``error: ...``), as ``xpuruntime``'s.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
import msgspec

from xpuruntime.policies import vocabulary
from xpuruntime.policies.differences import diff as diff_policies
from xpuruntime.policies.document import PolicyDocument, load_policy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.policies.formats import FORMATS, Format, format_of, parse, read_text
from xpuruntime.policies.json_output import (
    STDOUT,
    SingleValueCommand,
    check_output_file,
    json_option,
    write_json,
    write_text,
)
from xpuruntime.policies.layering import resolve_policy
from xpuruntime.policies.schema import json_schema

EXIT_INVALID = 1
EXIT_USAGE = 2

_policy_file = click.Path(exists=True, dir_okay=False, path_type=Path)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Read/write this format instead of guessing from the file suffix.",
)


def _fail(error: PolicyError) -> NoReturn:
    """An input that cannot be used (a file that is not a policy, an unknown op): exit 2."""
    raise click.UsageError(str(error))


class _OneLineErrors(click.Group):
    """``xpuruntime-policy`` on its own: click's errors as one ``error:`` line, not click's
    three-line usage block. (Under ``xpuruntime policy`` the ``xpuruntime`` group does this.)"""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {' '.join(exc.format_message().split())}{where}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(EXIT_INVALID)
        sys.exit(result if isinstance(result, int) else 0)

    command_class = SingleValueCommand


def _load(path: Path, fmt: Format | None) -> PolicyDocument:
    try:
        return load_policy(path, format=fmt)
    except PolicyError as error:
        _fail(error)


@click.group(
    name="policy", cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="xpuruntime-policies", prog_name="xpuruntime-policy")
def policy() -> None:
    """Check, normalize, compare and hash xpuruntime policy files (JSON, YAML, TOML)."""


@policy.command()
@click.argument("files", nargs=-1, required=True, type=_policy_file)
@_format_option
@json_option("each file's result")
def validate(files: tuple[Path, ...], fmt: Format | None, json_target: str | None) -> None:
    """Check policy FILES; print each one's content hash, or what is wrong with it."""
    results = []
    for path in files:
        try:
            document = load_policy(path, format=fmt)
        except PolicyError as error:
            errors = [str(e) for e in _every_error(path, fmt, error)]
            for message in errors:
                click.echo(f"error: {message}", err=True)
            results.append(
                {"file": str(path), "valid": False, "error": errors[0], "errors": errors}
            )
        else:
            if json_target != STDOUT:
                click.echo(f"ok: {path} (sha256 {document.content_hash()})")
            results.append({"file": str(path), "valid": True, "sha256": document.content_hash()})
    write_json({"files": results}, json_target)
    if not all(r["valid"] for r in results):
        sys.exit(EXIT_INVALID)


def _every_error(path: Path, fmt: Format | None, first: PolicyError) -> list[PolicyError]:
    """Every error of the file, not only ``first``: each setting an error locates is taken
    out and the rest checked again, until the rest is valid. (Checking settings one by one
    instead would report settings that are only wrong alone, such as lock without
    lock_file.)"""
    try:
        data = parse(read_text(path), format_of(path, fmt), str(path))
    except PolicyError:
        return [first]  # not parseable: the parser's one error is all there is
    errors = [first]
    while isinstance(data, dict) and len(errors) < _MAX_ERRORS:
        location = getattr(errors[-1], "location", None)
        if not location or not _remove(data, location.split(".")):
            break
        try:
            PolicyDocument.from_dict(data, source=str(path))
        except PolicyError as error:
            errors.append(error)
        else:
            break
    return errors


#: A file with more errors than this gets the first ones: enough to start fixing.
_MAX_ERRORS = 50


def _remove(data: dict[str, Any], parts: list[str]) -> bool:
    """Delete the setting at ``parts`` (``["execution", "memory", "pool"]``) from ``data``;
    False when it is not there (then removing cannot make progress)."""
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if not isinstance(node, dict) or parts[-1] not in node:
        return False
    del node[parts[-1]]
    return True


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
@json_option("the normalized document")
def show(
    file: Path,
    fmt: Format | None,
    output_format: Format | None,
    with_env: bool,
    json_target: str | None,
) -> None:
    """Print FILE normalized: every setting spelled out, ops sorted, defaults filled in."""
    try:
        load = resolve_policy if with_env else load_policy
        document = load(file, format=fmt)
    except PolicyError as error:
        _fail(error)
    if json_target != STDOUT:
        click.echo(document.dumps(output_format or format_of(file, fmt)), nl=False)
    write_json(document.to_dict(), json_target)


@policy.command(name="diff")
@click.argument("old", type=_policy_file)
@click.argument("new", type=_policy_file)
@json_option("the changes")
def diff_command(old: Path, new: Path, json_target: str | None) -> None:
    """Print the settings that differ from OLD to NEW; exit 1 when any do."""
    changes = diff_policies(_load(old, None), _load(new, None))
    if json_target != STDOUT:
        click.echo(str(changes))
    write_json(changes, json_target)
    if changes:
        sys.exit(EXIT_INVALID)


@policy.command(name="hash")
@click.argument("file", type=_policy_file)
@_format_option
@json_option("the hash")
def hash_command(file: Path, fmt: Format | None, json_target: str | None) -> None:
    """Print FILE's content hash (sha256 of its canonical JSON; same in every format)."""
    digest = _load(file, fmt).content_hash()
    if json_target != STDOUT:
        click.echo(digest)
    write_json({"file": str(file), "sha256": digest}, json_target)


@policy.command()
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file."
)
@json_option("the schema (the same as -o)")
def schema(output: Path | None, json_target: str | None) -> None:
    """Print the JSON Schema of policy files (point your editor at it for completion).

    An existing -o file must hold JSON (a previous schema); anything else is refused."""
    if output is not None:
        check_output_file(output, "json", {})
    if json_target is not None:
        write_json(json_schema(), json_target)
        return
    text = json.dumps(json_schema(), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text(output, text, "the schema")
        click.echo(f"wrote {output}")


@policy.command()
@click.argument("op", required=False)
@json_option("the ops, their kernels and the engines that run each")
def kernels(op: str | None, json_target: str | None) -> None:
    """List the ops and kernels a policy may name (of OP only, if given), with the engines
    that honour a pin of each kernel and on which devices, as each installed engine's own
    table says (engines marked * are described by the built-in list instead)."""
    unpublished: dict[str, str] = {}
    listed: dict[str, list[_KernelRow]] = {}
    try:
        for name in [op] if op else vocabulary.known_ops():
            rows = listed.setdefault(name, [])
            for spec in vocabulary.kernels_for(name):
                row = _KernelRow(spec.name, sorted(spec.devices), aliases=list(spec.aliases))
                for engine, (entry, table) in vocabulary.kernel_support(name, spec.name).items():
                    if not table.published:
                        unpublished[engine] = table.source
                    target = row.engines if entry.enforced else row.prefer_only
                    target[engine] = sorted(entry.devices)
                rows.append(row)
    except PolicyError as error:
        _fail(error)
    if json_target != STDOUT:
        every = [row for rows in listed.values() for row in rows]
        widths = (
            max([13, *(len(row.name) + 1 for row in every)]),
            max([10, *(len(",".join(row.devices)) + 1 for row in every)]),
        )
        for name, rows in listed.items():
            click.echo(f"{name}:")
            for row in rows:
                click.echo(_kernel_line(row, unpublished, widths))
        for engine, source in sorted(unpublished.items()):
            click.echo(f"* {engine}: {source}")
    write_json({"ops": msgspec.to_builtins(listed), "unpublished": unpublished}, json_target)
    for problem in (*vocabulary.plugin_problems(), *vocabulary.table_problems()):
        click.echo(f"warning: kernel plugin {problem.entry_point}: {problem.reason}", err=True)


class _KernelRow(msgspec.Struct):
    """One kernel of the listing: where it runs and which engines honour or steer it."""

    name: str
    devices: list[str]
    engines: dict[str, list[str]] = msgspec.field(default_factory=dict)
    prefer_only: dict[str, list[str]] = msgspec.field(default_factory=dict)
    aliases: list[str] = msgspec.field(default_factory=list)


def _kernel_line(row: _KernelRow, unpublished: dict[str, str], widths: tuple[int, int]) -> str:
    """``  cublasLt     devices=cuda      engines=onnxruntime(cuda),torch(cuda)``: the name
    and devices columns ``widths`` wide (the longest of the listing, so columns align)."""

    def engines(table: dict[str, list[str]]) -> str:
        return ",".join(
            f"{engine}{'*' if engine in unpublished else ''}({','.join(devices)})"
            for engine, devices in table.items()
        )

    name, devices = widths
    line = (
        f"  {row.name:<{name}}devices={','.join(row.devices):<{devices}}"
        f"engines={engines(row.engines) or '-'}"
    )
    if row.prefer_only:
        line += f"  prefer-only={engines(row.prefer_only)}"
    if row.aliases:
        line += f"  (also: {', '.join(row.aliases)})"
    return line
