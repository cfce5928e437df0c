"""Compiled-model caches keyed by content: model bytes + policy hash + environment.

Each entry is a folder ``<cache_dir>/<engine>/<key>/`` with a ``manifest.json`` of what the
key was made of, so a miss can say why it missed (new model, policy changed, environment
changed) instead of silently recompiling.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


def file_sha256(paths: Iterable[Path]) -> str:
    """SHA-256 over the bytes of ``paths`` in order (a model may span .xml + .bin)."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """Where one compiled model lives, whether it was there already, and why not."""

    directory: Path
    key: str
    hit: bool
    reason: str

    def as_record(self) -> dict[str, Any]:
        """The entry as the ``record.cache[engine]`` dict."""
        return {"dir": str(self.directory), "key": self.key, "hit": self.hit, "reason": self.reason}


def _miss_reason(root: Path, manifest: Mapping[str, Any]) -> str:
    """Compare with the other entries of this engine to say what changed."""
    same_model = []
    for other in sorted(root.glob(f"*/{MANIFEST}")):
        try:
            seen = json.loads(other.read_text())
        except (OSError, ValueError):
            continue
        if seen.get("model_sha256") == manifest["model_sha256"]:
            same_model.append(seen)
    if not same_model:
        return "miss: this model (by content) was not compiled here before"
    for seen in same_model:
        if seen.get("policy_hash") != manifest["policy_hash"]:
            continue
        env_now, env_then = manifest["environment"], seen.get("environment", {})
        changed = sorted(k for k in set(env_now) | set(env_then) if env_now.get(k) != env_then.get(k))
        return f"miss: same model and policy, environment changed in {changed}"
    return "miss: this model was compiled before under another policy (policy hash differs)"


def lookup(
    cache_dir: str | Path,
    engine: str,
    *,
    model_sha256: str,
    policy_hash: str,
    environment: Mapping[str, str],
    present: str,
) -> CacheEntry:
    """Find or create the entry for this key; ``present`` is a glob that marks a hit."""
    manifest = {
        "model_sha256": model_sha256,
        "policy_hash": policy_hash,
        "environment": dict(environment),
    }
    key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:24]
    root = Path(cache_dir).expanduser() / engine
    directory = root / key
    if directory.is_dir() and any(directory.glob(present)):
        return CacheEntry(directory, key, True, "hit")
    reason = _miss_reason(root, manifest) if root.is_dir() else "miss: empty cache"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return CacheEntry(directory, key, False, reason)
