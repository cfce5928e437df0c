"""``--json`` and ``--json-out PATH`` for every xpuruntime command (``xpuruntime`` and
``xpuruntime-policy``), and the rule that keeps every output file off the command's inputs.

``--json`` is a flag: JSON goes to stdout and the command writes nothing else there.
``--json-out PATH`` writes it to PATH (``-``: stdout). A flag that took an optional path would
take the next word, and ``inspect --json other.onnx model.onnx`` once overwrote a model.

No command writes over a file it was asked to read, or over an existing file that is not a
previous output of the same kind (JSON for ``--json-out`` and ``--record``, ``.npy`` for
``--save-outputs``): :func:`check_output_file` refuses with a usage error (exit 2) before the
command does any work. An option that takes one value may be given once
(:class:`SingleValueCommand`): ``--json-out a --json-out b`` must not write only to b.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import msgspec

from xpuruntime.policies.bundle import MANIFEST

F = TypeVar("F", bound=Callable[..., Any])

STDOUT = "-"
_NPY_MAGIC = b"\x93NUMPY"


def json_option(what: str) -> Callable[[F], F]:
    """``--json`` and ``--json-out PATH``; the command receives ``json_target`` (None, ``"-"``
    or a path checked by :func:`check_output_file`)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, json_stdout: bool, json_out: str | None, **kwargs: Any) -> Any:
            if json_stdout and json_out not in (None, STDOUT):
                raise click.UsageError("give --json (stdout) or --json-out PATH, not both")
            target = STDOUT if json_stdout else json_out
            if target is not None and target != STDOUT:
                check_output_file(Path(target), "json", kwargs)
            return func(*args, json_target=target, **kwargs)

        wrapper = click.option(
            "--json-out",
            "json_out",
            metavar="PATH",
            help=f"Write {what} as JSON to PATH ('-': stdout). An existing PATH must hold "
            f"JSON (a previous output) and may not be one of the command's inputs.",
        )(wrapper)
        wrapper = click.option(
            "--json",
            "json_stdout",
            is_flag=True,
            help=f"Write {what} as JSON to stdout (then nothing else goes to stdout).",
        )(wrapper)
        return cast(F, wrapper)

    return decorate


def _input_paths(params: Mapping[str, Any]) -> Iterator[Path]:
    """Every existing file a command's parameters name (``NAME=FILE`` values included), and
    every bundle folder: every path inside a bundle is an input too. (Other folders, such as
    ``--cache-dir`` or ``--save-outputs``, are where a command writes, not what it reads.)"""
    for value in params.values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(item, (str, os.PathLike)):
                continue
            text = os.fspath(item)
            for candidate in (text, text.partition("=")[2]):
                path = Path(candidate)
                if (
                    candidate
                    and path.exists()
                    and (not path.is_dir() or (path / MANIFEST).is_file())
                ):
                    yield path


def check_output_folder(folder: Path, what: str, params: Mapping[str, Any]) -> None:
    """Refuse (usage error) an output folder that is one of the inputs, lies inside an input
    folder (a bundle), is a file, or whose nearest existing parent cannot be written."""
    resolved = folder.resolve()
    for given in _input_paths(params):
        if given.is_dir() and resolved.is_relative_to(given.resolve()):
            raise click.UsageError(
                f"refusing to write {what} into {folder}: it is (inside) the input folder "
                f"{given}; choose another folder"
            )
    if folder.exists() and not folder.is_dir():
        raise click.UsageError(f"cannot write {what} into {folder}: it is a file, not a folder")
    _check_writable(folder if folder.exists() else _existing_parent(folder), what, folder)


def _existing_parent(path: Path) -> Path:
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    return parent


def _check_writable(folder: Path, what: str, path: Path) -> None:
    if not folder.is_dir():
        raise click.UsageError(f"cannot write {what} to {path}: {folder} is not a folder")
    # A probe file, not os.access: root passes os.access on /proc and read-only mounts.
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise click.UsageError(
            f"cannot write {what} to {path}: the folder {folder} is not writable "
            f"({exc.strerror or exc})"
        ) from exc


def _holds(path: Path, kind: str) -> bool:
    """Whether the existing file ``path`` is an output of ``kind`` ("json" or "npy")."""
    try:
        if kind == "npy":
            with path.open("rb") as f:
                return f.read(len(_NPY_MAGIC)) == _NPY_MAGIC
        json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return True


def check_output_file(path: Path, kind: str, params: Mapping[str, Any]) -> None:
    """Refuse (usage error) to write a ``kind`` output ("json" or "npy") to ``path`` when it
    is one of the inputs in ``params``, lies inside an input folder (a bundle), cannot be
    written (no such folder, not writable), or is an existing file that is not such an
    output."""
    check_output_location(path, f"{kind.upper()} output", params)
    if not path.exists():
        return
    if path.is_dir() or not _holds(path, kind):
        what = "a folder" if path.is_dir() else f"a file that does not hold {kind.upper()}"
        raise click.UsageError(
            f"refusing to write {kind.upper()} output to {path}: it is {what}; remove it "
            f"or choose another path"
        )


def check_output_location(path: Path, kind: str, params: Mapping[str, Any]) -> None:
    """Refuse (usage error) an output file ``path`` that is one of the inputs in ``params``,
    lies inside an input folder (a bundle), or whose folder is missing or not writable. What
    an existing file may be replaced with is the caller's rule."""
    resolved = path.resolve()
    for given in _input_paths(params):
        inside = given.is_dir() and resolved.is_relative_to(given.resolve())
        if inside or given.resolve() == resolved:
            where = f"inside the input folder {given}" if inside else "one of the command's inputs"
            raise click.UsageError(
                f"refusing to write {kind} to {path}: it is {where}; choose another path"
            )
    if not path.exists():
        if not path.parent.is_dir():
            why = "is a file" if path.parent.exists() else "does not exist"
            raise click.UsageError(f"cannot write {kind} to {path}: the folder {path.parent} {why}")
        _check_writable(path.parent, kind, path)


def write_json(data: Any, target: str | None) -> None:
    """Write ``data`` (anything msgspec encodes) where ``--json``/``--json-out`` said;
    nothing for None. A path that cannot be written is a one-line failure (exit 1)."""
    if target is None:
        return
    text = msgspec.json.format(msgspec.json.encode(data), indent=2).decode() + "\n"
    if target == STDOUT:
        sys.stdout.write(text)
    else:
        write_text(Path(target), text, "JSON")
        click.echo(f"JSON written to {target}", err=True)


def write_text(path: Path, text: str, what: str) -> None:
    """Write an output file; failing to is a one-line error (exit 1), not a traceback."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {what} to {path}: {exc.strerror or exc}") from exc


class SingleValueCommand(click.Command):
    """A command whose options that take one value may each be given once: click keeps the
    last of ``--json-out a --json-out b`` silently, and the user expected two files."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        single = {
            opt: param.name
            for param in self.params
            if isinstance(param, click.Option)
            and not (param.multiple or param.count or param.is_flag)
            for opt in param.opts
        }
        seen: dict[str | None, str] = {}
        for arg in args:
            if arg == "--":
                break
            opt = arg.partition("=")[0] if arg.startswith("--") else arg
            if opt not in single:
                continue
            name = single[opt]
            if name in seen:
                also = f" (also as {seen[name]})" if seen[name] != opt else ""
                raise click.UsageError(f"{opt} is given twice{also}; it takes one value", ctx=ctx)
            seen[name] = opt
        return super().parse_args(ctx, args)
