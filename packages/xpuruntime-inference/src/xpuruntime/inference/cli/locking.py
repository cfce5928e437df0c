"""``xpuruntime lock``: record, replay, diff and show decision lockfiles.

``record`` and ``replay`` open a session on a model (or a bundle directory) under the lock and
run it; ``diff`` compares two lockfiles, or one lockfile with this machine (which entries
would replay here and why the others would not); ``show`` lists a lockfile's decisions.
``--lock FILE`` on ``run``, ``bench`` and ``explain`` replays a lockfile there (a policy flag,
see :mod:`.options`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xpuruntime.inference.cli.options import InputFlags, input_options
from xpuruntime.policies.errors import XpuRuntimeError

if TYPE_CHECKING:
    from xpuruntime.inference.session import InferenceSession
    from xpuruntime.policies.lock import LockEntry, Lockfile

__all__ = ["lock"]


def _console() -> Console:
    # Per command: CliRunner swaps sys.stdout.
    return Console(file=sys.stdout)


def _fail(exc: BaseException) -> click.ClickException:
    return click.ClickException(f"{type(exc).__name__}: {exc}")


def _load(path: str) -> Lockfile:
    from xpuruntime.policies.lock import Lockfile

    try:
        return Lockfile.load(path)
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc


@click.group()
def lock() -> None:
    """Decision lockfiles: record what was decided, replay it, compare and inspect it."""


def _session_options(func: Any) -> Any:
    options = [
        click.argument("model", type=click.Path(exists=True)),
        click.option(
            "--lock",
            "lock_file",
            required=True,
            type=click.Path(dir_okay=False),
            help="the lockfile",
        ),
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda:N"),
        click.option("--engine", default="auto", show_default=True, help="auto or an engine"),
        click.option(
            "--policy",
            "policy_file",
            type=click.Path(exists=True, dir_okay=False),
            help="ExecutionPolicy file (default: the bundle's, or the defaults)",
        ),
        click.option(
            "--fallback",
            type=click.Choice(["error", "warn", "allow"]),
            help="override the policy's fallback mode",
        ),
        click.option("--runs", default=1, show_default=True, help="Runs to make."),
    ]
    for option in reversed(options):
        func = option(func)
    return input_options(func)


def _run_locked(
    mode: str,
    model: str,
    lock_file: str,
    device: str,
    engine: str,
    policy_file: str | None,
    fallback: str | None,
    runs: int,
    **inputs: Any,
) -> InferenceSession:
    from xpuruntime.inference import InferenceSession
    from xpuruntime.inference.bundle import open_bundle

    path = Path(model)
    bundle = open_bundle(path) if path.is_dir() else None
    # The command's flags are the arguments layer: over the policy file (or the bundle's
    # policy) and the environment.
    execution: dict[str, Any] = {"lock": mode, "lock_file": lock_file}
    if fallback is not None:
        execution["fallback"] = fallback
    sess = InferenceSession(
        path,
        device=device,
        engine=engine,
        exec_policy=policy_file,
        policy_arguments={"execution": execution},
    )
    feeds = (
        bundle.reference()[0]
        if bundle is not None
        else InputFlags.of(inputs).feeds(sess.inputs, sess.policy.input_shapes)
    )
    for _ in range(runs):
        sess.run(feeds)
    return sess


def _decisions_table(sess: InferenceSession) -> Table:
    record = sess.record()
    table = Table(title=f"{sess.engine} on {sess.device}: decisions")
    for column in ("status", "op", "chosen", "reason"):
        table.add_column(column, overflow="fold")
    for d in record.decisions:
        table.add_row(d.status, escape(d.op), escape(d.kernel), escape(d.reason))
    return table


@lock.command()
@_session_options
def record(**options: Any) -> None:
    """Run MODEL (a .onnx file or a bundle) and write its decisions into --lock."""
    try:
        sess = _run_locked("record", **options)
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    console = _console()
    console.print(_decisions_table(sess))
    console.print(f"decisions recorded in {options['lock_file']}")


@lock.command()
@_session_options
def replay(**options: Any) -> None:
    """Run MODEL replaying --lock; says which decisions were locked and which fell back."""
    try:
        sess = _run_locked("replay", **options)
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    console = _console()
    console.print(_decisions_table(sess))
    fallbacks = sess.record().fallbacks
    for f in fallbacks:
        console.print(f"[yellow]fell back[/]: {escape(f.what)}: {escape(f.reason)}")
    console.print(
        f"{sum(d.status == 'locked' for d in sess.record().decisions)} locked,"
        f" {len(fallbacks)} fell back"
    )


def _entries_table(title: str, entries: list[LockEntry], why: dict[int, str] | None) -> Table:
    table = Table(title=title)
    columns = ["domain", "op", "signature", "choice", "best timed"]
    if why is not None:
        columns.append("here")
    for column in columns:
        table.add_column(column, overflow="fold")
    for index, entry in enumerate(entries):
        timed = [c for c in entry.candidates if c.ms is not None]
        best = min(timed, key=lambda c: c.ms or 0.0) if timed else None
        signature = " ".join(
            part for part in (entry.dtype, entry.shape, entry.layout, entry.device) if part
        )
        if entry.model:
            signature += f" model {entry.model[:12]}"
        row = [
            entry.domain,
            entry.op,
            signature,
            entry.chosen(),
            f"{best.name} {best.ms:.4g} ms" if best is not None else "",
        ]
        if why is not None:
            row.append(why.get(index) or "[green]replays[/]")
        table.add_row(*(escape(cell) if "[green]" not in cell else cell for cell in row))
    return table


@lock.command()
@click.argument("lock_file", type=click.Path(exists=True, dir_okay=False))
def show(lock_file: str) -> None:
    """List the decisions in LOCK_FILE and the environments they were taken in."""
    lockfile = _load(lock_file)
    console = _console()
    console.print(f"{lock_file}: {len(lockfile)} decisions, hash {lockfile.content_hash()[:16]}")
    for key, fingerprint in lockfile.environments.items():
        gpus = ", ".join(fingerprint.get("gpu") or []) or "no GPU"
        packages = fingerprint.get("packages") or {}
        versions = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        console.print(f"environment {key[:12]}: {escape(gpus)}; {escape(versions)}")
    console.print(_entries_table("Decisions", list(lockfile), None))


@lock.command()
@click.argument("a", type=click.Path(exists=True, dir_okay=False))
@click.argument("b", type=click.Path(exists=True, dir_okay=False), required=False)
def diff(a: str, b: str | None) -> None:
    """Compare two lockfiles, or (one given) A with this machine: which decisions would
    replay here and why the others would not."""
    from xpuruntime.policies.lock import diff_locks

    first = _load(a)
    console = _console()
    if b is not None:
        changes = diff_locks(first, _load(b))
        console.print(escape(str(changes)))
        return
    from xpuruntime.inference.lock_check import replay_here

    why = replay_here(first, a)
    entries = list(first)
    console.print(_entries_table(f"{a} on this machine", entries, why))
    console.print(f"{len(entries) - len(why)} of {len(entries)} decisions would replay here")


@lock.command()
def schema() -> None:
    """Print the JSON Schema of lockfiles."""
    import json

    from xpuruntime.policies.lock import lock_json_schema

    click.echo(json.dumps(lock_json_schema(), indent=2))
