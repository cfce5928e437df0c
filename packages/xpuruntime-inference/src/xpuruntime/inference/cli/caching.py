"""``cache list|clear|explain``: the content-addressed caches of compiled and optimized models."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import click

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import (
    COMMAND_DEFAULT,
    MODEL,
    PolicyFlags,
    engine_option,
    policy_options,
)
from xpuruntime.inference.cli.output import Output, human_bytes, json_option


def _dir_option(func: Any) -> Any:
    return click.option(
        "--dir",
        "folder",
        type=click.Path(exists=True, file_okay=False),
        help="The cache folder [default: the policy's cache_dir (--policy file, "
        "$XPURUNTIME_POLICY_FILE, $XPURUNTIME_POLICY_CACHE_DIR), else $XPURUNTIME_CACHE_DIR, "
        "else the per-user cache folder].",
    )(func)


def _policy_file_option(func: Any) -> Any:
    return click.option(
        "--policy",
        "policy_file",
        type=click.Path(exists=True, dir_okay=False),
        help="ExecutionPolicy file whose cache_dir to use; default $XPURUNTIME_POLICY_FILE.",
    )(func)


def _root(folder: str | None, policy_file: str | None) -> Path:
    """--dir, else the cache_dir the policy layers give (what sessions would use)."""
    from xpuruntime.inference.cache import cache_root

    if folder is not None:
        return cache_root(folder)
    flags = PolicyFlags(policy_file, None, None, None, None, None)
    return cache_root(flags.layered(cache_dir="default").policy.cache_dir)


def _engine_names() -> list[str]:
    from xpuruntime.inference.selection import engine_overview

    return [e.name for e in engine_overview()]


def _refuse_a_folder_that_is_not_a_cache(root: Path) -> None:
    """``clear`` removes every folder two levels below ``root``: on a folder that is not a
    cache (a home directory, a project) that would be other people's files. A cache holds
    only kind folders, each named after its engine."""
    engines = _engine_names()
    strangers = sorted(
        p.name
        for p in root.iterdir()
        if not p.name.startswith(".") and p.name.split("-")[0] not in engines
    )
    if strangers:
        raise click.UsageError(
            f"{root} does not look like an xpuruntime cache: it holds "
            f"{', '.join(repr(n) for n in strangers[:5])}{' ...' if len(strangers) > 5 else ''},"
            f" and cache folders hold only kind folders named after an engine "
            f"({', '.join(engines)}); name the cache folder itself"
        )


def _checked_kind(root: Path, kind: str | None) -> str | None:
    """--kind: a kind this cache holds, or one an engine writes (named after the engine)."""
    from xpuruntime.inference.cache import all_entries

    if kind is None:
        return None
    present = sorted({e.kind for e in all_entries(root)})
    engines = _engine_names()
    if kind in present or kind.split("-")[0] in engines:
        return kind
    raise click.BadParameter(
        f"unknown cache kind {kind!r}: kinds are named after the engine that writes them "
        f"({', '.join(engines)}, such as onnxruntime-optimized-model); this cache holds "
        f"{', '.join(present) or 'no entries'}",
        param_hint="--kind",
    )


def _entry_json(entry: Any) -> dict[str, Any]:
    return {
        "kind": entry.kind,
        "path": str(entry.path),
        "key": entry.key.digest if entry.key else None,
        "components": dict(entry.key.components) if entry.key else {},
        "bytes": entry.size,
        "last_used": entry.last_used,
        "problem": entry.problem,
    }


@main.group()
def cache() -> None:
    """Inspect and clear the caches of compiled engines and optimized models."""


@cache.command(name="list")
@_dir_option
@_policy_file_option
@click.option("--kind", help="Only entries of this kind (onnxruntime-optimized-model, ...).")
@json_option("the entries")
def list_entries(
    folder: str | None, policy_file: str | None, kind: str | None, json_target: str | None
) -> None:
    """List the cache's entries: kind, key, size, when last used."""
    from xpuruntime.inference.cache import all_entries

    root = _root(folder, policy_file)
    kind = _checked_kind(root, kind)
    entries = [e for e in all_entries(root) if kind is None or e.kind == kind]
    out = Output(json_target)
    table = out.table(f"Cache {root}", "kind", "key", "size", "last used", "problem")
    for e in entries:
        used = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used)) if e.last_used else ""
        )
        table.add_row(e.kind, e.path.name[:16], human_bytes(e.size), used, e.problem)
    out.print(table, f"{len(entries)} entries, {human_bytes(sum(e.size for e in entries))}")
    out.emit({"root": str(root), "entries": [_entry_json(e) for e in entries]})


@cache.command()
@_dir_option
@_policy_file_option
@click.option("--kind", help="Only entries of this kind.")
@json_option("the removed entries")
def clear(
    folder: str | None, policy_file: str | None, kind: str | None, json_target: str | None
) -> None:
    """Remove the cache's entries (all, or those of --kind). A folder that holds anything but
    the engines' kind folders is refused: it is not a cache."""
    from xpuruntime.inference.cache import clear as clear_cache

    root = _root(folder, policy_file)
    if root.is_dir():
        _refuse_a_folder_that_is_not_a_cache(root)
    removed = clear_cache(root, _checked_kind(root, kind))
    out = Output(json_target)
    out.print(
        f"removed {len(removed)} entries ({human_bytes(sum(e.size for e in removed))}) from {root}"
    )
    out.emit({"root": str(root), "removed": [_entry_json(e) for e in removed]})


@cache.command(name="explain")
@click.argument("model", type=MODEL, required=False)
@engine_option
@policy_options
@json_option("the cache's settings (and MODEL's lookups)")
def explain_cache(model: str | None, engine: str, json_target: str | None, **options: Any) -> None:
    """Where the cache is and why, its size bound and use; with MODEL, open a session with
    the cache and say, per cache, whether it hit and why it missed."""
    from xpuruntime.inference.cache import (
        DIR_VARIABLE,
        SIZE_VARIABLE,
        all_entries,
        cache_root,
        max_cache_bytes,
    )
    from xpuruntime.inference.cli.options import open_session

    layered = PolicyFlags.of(options).layered(cache_dir="default")
    root = cache_root(layered.policy.cache_dir)
    source = layered.source_of("execution.cache_dir")
    if source != COMMAND_DEFAULT:
        why = f"set by {source}"
    elif os.environ.get(DIR_VARIABLE):
        why = f"${DIR_VARIABLE}"
    else:
        why = "the per-user cache folder"
    bound = max_cache_bytes()
    entries = all_entries(root)
    info: dict[str, Any] = {
        "root": str(root),
        "chosen_by": why,
        "max_bytes": bound,
        "bytes": sum(e.size for e in entries),
        "entries": len(entries),
        "lookups": {},
    }
    out = Output(json_target)
    out.print(
        f"cache folder: {root} ({why})",
        f"size bound: {human_bytes(bound) if bound else 'none'} (${SIZE_VARIABLE}); least "
        f"recently used entries are evicted beyond it",
        f"in use: {len(entries)} entries, {human_bytes(info['bytes'])}",
        "entries are published atomically, verified by SHA-256 on every lookup, and rebuilt "
        "when damaged; writers in several processes are serialised by file locks",
    )
    if model is not None:
        sess = open_session(model, engine, layered)
        info["lookups"] = sess.record().cache
        for kind, entry in info["lookups"].items():
            out.print(f"{kind}: {entry.get('explanation', '')} ({entry.get('path', '')})")
        sess.close()
    out.emit(info)
