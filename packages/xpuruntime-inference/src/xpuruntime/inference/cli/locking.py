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
from rich.table import Table
from rich.text import Text

from xpuruntime.inference.cli.app import CommandGroup
from xpuruntime.inference.cli.options import (
    MODEL,
    InputFlags,
    checked_engine,
    checked_lockfile,
    input_options,
)
from xpuruntime.inference.cli.output import Output, json_option
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.policies.json_output import check_output_file, write_json

if TYPE_CHECKING:
    from xpuruntime.inference.session import InferenceSession
    from xpuruntime.policies.lock import LockEntry, Lockfile

__all__ = ["lock"]


def _load(path: str) -> Lockfile:
    from xpuruntime.policies.lock import Lockfile

    try:
        return Lockfile.load(path)
    except XpuRuntimeError as exc:  # a file that is not a lockfile: a bad argument
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=CommandGroup)
def lock() -> None:
    """Decision lockfiles: record what was decided, replay it, compare and inspect it."""


def _session_options(func: Any) -> Any:
    options = [
        click.argument("model", type=MODEL),
        click.option(
            "--lock",
            "lock_file",
            required=True,
            type=click.Path(dir_okay=False),
            help="the lockfile",
        ),
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda:N"),
        click.option(
            "--engine",
            default="auto",
            show_default=True,
            callback=checked_engine,
            help="auto or an engine",
        ),
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
        click.option(
            "--runs", default=1, show_default=True, type=click.IntRange(min=1), help="Runs to make."
        ),
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
    from xpuruntime.inference.cli.options import session_feeds

    # The command's flags are the arguments layer: over the policy file (or the bundle's
    # policy) and the environment.
    execution: dict[str, Any] = {"lock": mode, "lock_file": lock_file}
    if fallback is not None:
        execution["fallback"] = fallback
    sess = InferenceSession(
        Path(model),
        device=device,
        engine=engine,
        exec_policy=policy_file,
        policy_arguments={"execution": execution},
    )
    feeds = session_feeds(sess, model, InputFlags.of(inputs))
    for _ in range(runs):
        sess.run(feeds)
    return sess


def _decisions_table(out: Output, sess: InferenceSession) -> Table:
    table = out.table(
        f"{sess.engine} on {sess.device}: decisions", "status", "op", "chosen", "reason"
    )
    for d in sess.record().decisions:
        table.add_row(d.status, d.op, d.kernel, d.reason)
    return table


def _session_report(sess: InferenceSession, lock_file: str) -> dict[str, Any]:
    record = sess.record()
    return {
        "lock_file": lock_file,
        "engine": sess.engine,
        "device": sess.device,
        "decisions": record.decisions,
        "fallbacks": record.fallbacks,
    }


@lock.command()
@_session_options
@json_option("the decisions recorded")
def record(json_target: str | None, **options: Any) -> None:
    """Run MODEL (a .onnx file or a bundle) and write its decisions into --lock (an existing
    --lock must be a lockfile: JSON, never one of the inputs)."""
    check_output_file(Path(options["lock_file"]), "json", {"model": options["model"]})
    sess = _run_locked("record", **options)
    out = Output(json_target)
    out.print(_decisions_table(out, sess), f"decisions recorded in {options['lock_file']}")
    out.emit(_session_report(sess, options["lock_file"]))


@lock.command()
@_session_options
@json_option("the decisions, locked or fallen back")
def replay(json_target: str | None, **options: Any) -> None:
    """Run MODEL replaying --lock; says which decisions were locked and which fell back."""
    try:
        checked_lockfile(None, None, options["lock_file"])
    except click.BadParameter as exc:
        exc.param_hint = "--lock"
        raise
    sess = _run_locked("replay", **options)
    out = Output(json_target)
    out.print(_decisions_table(out, sess))
    fallbacks = sess.record().fallbacks
    for f in fallbacks:
        out.print(Text.assemble(("fell back", "yellow"), f": {f.what}: {f.reason}"))
    out.print(
        f"{sum(d.status == 'locked' for d in sess.record().decisions)} locked,"
        f" {len(fallbacks)} fell back"
    )
    out.emit(_session_report(sess, options["lock_file"]))


def _entries_table(
    out: Output, title: str, entries: list[LockEntry], why: dict[int, str] | None
) -> Table:
    columns = ["domain", "op", "signature", "choice", "best timed"]
    if why is not None:
        columns.append("here")
    table = out.table(title, *columns)
    for index, entry in enumerate(entries):
        best = _best_timed(entry)
        row: list[str | Text] = [
            entry.domain,
            entry.op,
            _signature(entry),
            entry.chosen(),
            f"{best[0]} {best[1]:.4g} ms" if best is not None else "",
        ]
        if why is not None:
            row.append(why.get(index) or Text("replays", style="green"))
        table.add_row(*row)
    return table


def _best_timed(entry: LockEntry) -> tuple[str, float] | None:
    timed = [(c.name, c.ms) for c in entry.candidates if c.ms is not None]
    return min(timed, key=lambda c: c[1]) if timed else None


def _signature(entry: LockEntry) -> str:
    signature = " ".join(
        part for part in (entry.dtype, entry.shape, entry.layout, entry.device) if part
    )
    return signature + (f" model {entry.model[:12]}" if entry.model else "")


@lock.command()
@click.argument("lock_file", type=click.Path(exists=True, dir_okay=False))
@json_option("the lockfile's decisions and environments")
def show(lock_file: str, json_target: str | None) -> None:
    """List the decisions in LOCK_FILE and the environments they were taken in."""
    lockfile = _load(lock_file)
    out = Output(json_target)
    out.print(f"{lock_file}: {len(lockfile)} decisions, hash {lockfile.content_hash()[:16]}")
    for key, fingerprint in lockfile.environments.items():
        gpus = ", ".join(fingerprint.get("gpu") or []) or "no GPU"
        packages = fingerprint.get("packages") or {}
        versions = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        out.print(f"environment {key[:12]}: {gpus}; {versions}")
    out.print(_entries_table(out, "Decisions", list(lockfile), None))
    out.emit(
        {
            "lock_file": lock_file,
            "hash": lockfile.content_hash(),
            "environments": lockfile.environments,
            "entries": list(lockfile),
        }
    )


@lock.command()
@click.argument("a", type=click.Path(exists=True, dir_okay=False))
@click.argument("b", type=click.Path(exists=True, dir_okay=False), required=False)
@json_option("the differences (or, with A alone, which decisions replay here)")
def diff(a: str, b: str | None, json_target: str | None) -> None:
    """Compare two lockfiles, or (one given) A with this machine: which decisions would
    replay here and why the others would not. Exit 1 when the lockfiles differ (or, with A
    alone, when a decision would not replay here), 0 when they agree."""
    from xpuruntime.policies.lock import diff_locks

    first = _load(a)
    out = Output(json_target)
    if b is not None:
        changes = diff_locks(first, _load(b))
        out.print(str(changes))
        out.emit({"a": a, "b": b, "changes": list(changes)})
        if changes:
            sys.exit(1)
        return
    from xpuruntime.inference.lock_check import replay_here

    why = replay_here(first, a)
    entries = list(first)
    out.print(
        _entries_table(out, f"{a} on this machine", entries, why),
        f"{len(entries) - len(why)} of {len(entries)} decisions would replay here",
    )
    out.emit(
        {
            "lock_file": a,
            "entries": [
                {"entry": entry, "replays": index not in why, "why_not": why.get(index, "")}
                for index, entry in enumerate(entries)
            ],
        }
    )
    if why:
        sys.exit(1)


@lock.command()
@json_option("the schema")
def schema(json_target: str | None) -> None:
    """Print the JSON Schema of lockfiles."""
    import json

    from xpuruntime.policies.lock import lock_json_schema

    if json_target is not None:
        write_json(lock_json_schema(), json_target)
        return
    click.echo(json.dumps(lock_json_schema(), indent=2))
