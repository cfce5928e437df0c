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
    PolicyFlags,
    engine_option,
    policy_options,
)
from xpuruntime.inference.cli.output import Output, human_bytes, json_option
from xpuruntime.inference.cli.running import MODEL


def _dir_option(func: Any) -> Any:
    return click.option(
        "--dir",
        "folder",
        help="The cache folder [default: $XPURUNTIME_CACHE_DIR, else the per-user cache folder].",
    )(func)


def _root(folder: str | None) -> Path:
    from xpuruntime.inference.cache import cache_root

    return cache_root(folder)


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
@click.option("--kind", help="Only entries of this kind (onnxruntime-optimized-model, ...).")
@json_option("the entries")
def list_entries(folder: str | None, kind: str | None, json_target: str | None) -> None:
    """List the cache's entries: kind, key, size, when last used."""
    from xpuruntime.inference.cache import all_entries

    root = _root(folder)
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
@click.option("--kind", help="Only entries of this kind.")
@json_option("the removed entries")
def clear(folder: str | None, kind: str | None, json_target: str | None) -> None:
    """Remove the cache's entries (all, or those of --kind)."""
    from xpuruntime.inference.cache import clear as clear_cache

    root = _root(folder)
    removed = clear_cache(root, kind)
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
