"""Content-addressed caches: keys from content, misses that say why, and entries that heal.

Fault injection on real files (truncated, overwritten, emptied, removed payloads; folders
that cannot be written) and real concurrent processes writing one key.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from xpuruntime.inference import CacheKey, ContentCache, InferenceSession
from xpuruntime.inference.cache import (
    KEY_FILE,
    all_entries,
    cache_root,
    clear,
    default_cache_dir,
    parse_size,
    verify_entry,
)
from xpuruntime.inference.errors import CacheError
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.errors import FallbackError

ORT_KIND = "onnxruntime-optimized-model"


def key(**changes: str) -> CacheKey:
    components = {
        "model": "a" * 64,
        "policy": "b" * 64,
        "environment": "c" * 64,
        "engine": "onnxruntime 1.0",
    }
    return CacheKey("demo", {**components, **changes})


def store(cache: ContentCache, k: CacheKey, payload: bytes = b"payload" * 100) -> Path:
    lookup = cache.lookup(k)
    assert not lookup.hit
    (lookup.entry / "blob.bin").write_bytes(payload)
    assert lookup.commit()
    return lookup.path


def test_digest_depends_on_content_only() -> None:
    assert key().digest == key().digest
    reordered = CacheKey("demo", dict(reversed(list(key().components.items()))))
    assert reordered.digest == key().digest
    assert key(model="d" * 64).digest != key().digest


def test_miss_names_the_changed_component(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo")
    first = cache.lookup(key())
    assert not first.hit
    assert "has no entry" in first.explanation
    (first.entry / "blob.bin").write_bytes(b"x")
    first.commit()
    assert cache.lookup(key()).hit
    miss = cache.lookup(key(environment="e" * 64))
    assert not miss.hit
    assert miss.explanation == (
        "miss: environment changed (cccccccccccc -> eeeeeeeeeeee) (compared with the closest entry)"
    )
    assert "model" not in miss.explanation


def test_a_miss_writes_to_staging_and_publishes_atomically(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo")
    lookup = cache.lookup(key())
    assert lookup.entry != lookup.path
    assert not lookup.path.exists()  # nothing visible before the commit
    (lookup.entry / "blob.bin").write_bytes(b"abc")
    assert lookup.commit()
    assert not lookup.entry.exists()
    assert (lookup.path / "blob.bin").read_bytes() == b"abc"
    assert verify_entry(lookup.path, key()) is None


def test_an_abandoned_miss_leaves_nothing(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo")
    lookup = cache.lookup(key())
    staging = lookup.entry
    (staging / "half.bin").write_bytes(b"half")
    del lookup  # the writer gave up (its build failed)
    assert not staging.exists()
    assert all_entries(tmp_path) == []
    empty = cache.lookup(key())
    assert not empty.commit()  # no payload: nothing published
    assert not empty.path.exists()


def test_a_commit_keeps_the_reason_the_engine_gave_for_storing_nothing(tmp_path: Path) -> None:
    from xpuruntime.runtime.record import ExecutionRecord

    record = ExecutionRecord(kind="inference")
    lookup = ContentCache(tmp_path, "demo").lookup(key())
    record.cache["demo"] = lookup.as_record()
    record.cache["demo"]["store_problem"] = "QNN wrote no context model"  # the adapter's
    assert not lookup.commit(record)
    assert record.cache["demo"]["stored"] is False
    assert record.cache["demo"]["store_problem"] == "QNN wrote no context model"
    # Without a reason of the engine's, the commit says what it saw.
    other = ExecutionRecord(kind="inference")
    empty = ContentCache(tmp_path, "demo").lookup(key())
    other.cache["demo"] = empty.as_record()
    assert not empty.commit(other)
    assert other.cache["demo"]["store_problem"] == "the engine wrote nothing to cache"


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("truncate", "has 3 bytes, 700 were stored"),
        ("garbage", "does not match its SHA-256"),
        ("empty", "has 0 bytes, 700 were stored"),
        ("missing", "blob.bin is missing"),
        ("manifest", f"{KEY_FILE} is unreadable"),
        ("no-manifest", f"{KEY_FILE} is missing"),
    ],
)
def test_damaged_entry_is_discarded_and_rebuilt(tmp_path: Path, damage: str, problem: str) -> None:
    cache = ContentCache(tmp_path, "demo")
    entry = store(cache, key())
    blob = entry / "blob.bin"
    if damage == "truncate":
        blob.write_bytes(blob.read_bytes()[:3])
    elif damage == "garbage":
        blob.write_bytes(os.urandom(700))
    elif damage == "empty":
        blob.write_bytes(b"")
    elif damage == "missing":
        blob.unlink()
    elif damage == "manifest":
        (entry / KEY_FILE).write_bytes(b"\x00garbage")
    else:
        (entry / KEY_FILE).unlink()
    miss = cache.lookup(key())
    assert not miss.hit
    assert miss.explanation.startswith("miss: the stored entry was damaged")
    assert problem in miss.explanation
    assert not entry.exists()  # discarded
    (miss.entry / "blob.bin").write_bytes(b"payload" * 100)
    assert miss.commit()
    assert cache.lookup(key()).hit


def test_unusable_folder_is_a_typed_error(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    with pytest.raises(CacheError, match="cannot hold new entries"):
        ContentCache(not_a_folder, "demo").lookup(key())


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs (read-only)")
def test_read_only_filesystem_is_a_typed_error() -> None:
    # sysfs refuses new folders even to root: a read-only location on any Linux machine.
    with pytest.raises(CacheError, match="writable folder"):
        ContentCache("/sys/kernel/xpuruntime-cache", "demo").lookup(key())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_cache_still_serves_hits(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo")
    store(cache, key())
    for folder in (tmp_path, tmp_path / "demo"):
        folder.chmod(0o555)
    try:
        assert cache.lookup(key()).hit
        with pytest.raises(CacheError):
            cache.lookup(key(model="f" * 64))
    finally:
        for folder in (tmp_path, tmp_path / "demo"):
            folder.chmod(0o755)


def test_size_bound_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo", max_bytes=2500)
    old = store(cache, key(model="1" * 64), b"a" * 1000)
    newer = store(cache, key(model="2" * 64), b"b" * 1000)
    past = 1_000_000.0
    os.utime(old / KEY_FILE, (past, past))
    os.utime(newer / KEY_FILE, (past + 10, past + 10))
    assert cache.lookup(key(model="1" * 64)).hit  # a hit makes it the most recently used
    store(cache, key(model="3" * 64), b"c" * 1000)
    left = {e.key.components["model"][0] for e in all_entries(tmp_path) if e.key}
    assert left == {"1", "3"}
    assert sum(e.size for e in all_entries(tmp_path)) <= 2500


def test_recently_used_entries_are_not_evicted(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo", max_bytes=10)
    store(cache, key(model="1" * 64), b"a" * 100)
    store(cache, key(model="2" * 64), b"b" * 100)
    assert len(all_entries(tmp_path)) == 2  # both used within the grace period


def test_clear_and_sizes(tmp_path: Path) -> None:
    store(ContentCache(tmp_path, "demo"), key())
    store(ContentCache(tmp_path, "other"), key())
    assert [e.kind for e in clear(tmp_path, "other")] == ["other"]
    assert [e.kind for e in all_entries(tmp_path)] == ["demo"]
    clear(tmp_path)
    assert all_entries(tmp_path) == []
    assert parse_size("20GiB") == 20 * 2**30
    assert parse_size("500M") == 500 * 2**20
    assert parse_size("1024") == 1024
    assert parse_size("0") is None
    with pytest.raises(CacheError, match="cannot read the cache size"):
        parse_size("lots")


def test_default_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XPURUNTIME_CACHE_DIR", raising=False)
    assert default_cache_dir().name == "xpuruntime"
    assert cache_root("default") == default_cache_dir()
    monkeypatch.setenv("XPURUNTIME_CACHE_DIR", str(tmp_path))
    assert cache_root(None) == tmp_path


_WRITER = textwrap.dedent(
    """
    import hashlib, sys
    from xpuruntime.inference.cache import CacheKey, ContentCache
    root, rounds = sys.argv[1], int(sys.argv[2])
    hits = 0
    for round in range(rounds):  # every process races on the key of each round
        key = CacheKey("demo", {"model": f"shared-{round}"})
        payload = hashlib.sha256(key.digest.encode()).digest() * 65536  # 2 MiB
        lookup = ContentCache(root, "demo", max_bytes=None).lookup(key)
        if lookup.hit:
            got = (lookup.entry / "blob.bin").read_bytes()
            assert got == payload, f"a reader saw {len(got)} of {len(payload)} bytes"
            hits += 1
            continue
        with open(lookup.entry / "blob.bin", "wb") as f:
            for i in range(0, len(payload), 65536):  # in pieces, so writers overlap
                f.write(payload[i : i + 65536])
        lookup.commit()
    print(hits)
    """
)


def test_concurrent_writers_of_one_key_never_expose_a_partial_entry(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    hits = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        hits += int(out)
    assert hits > 0  # readers did see published entries, each of them complete
    for entry in all_entries(tmp_path):
        assert verify_entry(entry.path) is None
    assert not list(tmp_path.glob("demo/.staging-*"))


def _ort_cache(tmp_path: Path) -> Path:
    (entry,) = [e.path for e in all_entries(tmp_path / "cache") if e.kind == ORT_KIND]
    return entry / "model.onnx"


def test_onnxruntime_optimized_model_cache(tmp_path: Path, make_mlp: Any) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    policy = ExecutionPolicy(cache_dir=str(tmp_path / "cache"))
    x = {"input": np.ones((2, 4), np.float32)}

    first = InferenceSession(model, device="cpu", exec_policy=policy)
    entry = first.record().cache[ORT_KIND]
    assert entry["hit"] is False
    assert entry["stored"] is True
    assert (Path(entry["path"]) / "model.onnx").is_file()

    second = InferenceSession(model, device="cpu", exec_policy=policy)
    hit = second.record().cache[ORT_KIND]
    assert hit["hit"] is True
    assert hit["key"] == entry["key"]
    np.testing.assert_allclose(second.run(x)["output"], first.run(x)["output"], rtol=1e-6)

    make_mlp(model, weight_scale=2.0)  # same path, other bytes
    third = InferenceSession(model, device="cpu", exec_policy=policy)
    miss = third.record().cache[ORT_KIND]
    assert miss["hit"] is False
    assert miss["explanation"].startswith("miss: model changed")
    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(third.run(x)["output"], raw.run(None, x)[0], rtol=1e-6)

    other_policy = InferenceSession(
        model, device="cpu", exec_policy=policy.replace(graph_optimization="basic")
    )
    # A miss names the setting that changed, not a policy hash.
    explanation = other_policy.record().cache[ORT_KIND]["explanation"]
    assert 'setting.graph_optimization changed ("all" -> "basic")' in explanation


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_onnxruntime_entry_heals(tmp_path: Path, make_mlp: Any, damage: str) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    policy = ExecutionPolicy(cache_dir=str(tmp_path / "cache"))
    x = {"input": np.ones((2, 4), np.float32)}
    expected = InferenceSession(model, device="cpu", exec_policy=policy).run(x)["output"]
    cached = _ort_cache(tmp_path)
    data = cached.read_bytes()
    cached.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": os.urandom(len(data)), "empty": b""}[damage]
    )
    for _ in range(2):  # the damaged entry is rebuilt once, then hit
        sess = InferenceSession(model, device="cpu", exec_policy=policy)
        np.testing.assert_allclose(sess.run(x)["output"], expected, rtol=1e-6)
    first_after = InferenceSession(model, device="cpu", exec_policy=policy)
    assert first_after.record().cache[ORT_KIND]["hit"] is True


def test_damaged_onnxruntime_entry_is_recorded_as_a_miss(tmp_path: Path, make_mlp: Any) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    policy = ExecutionPolicy(cache_dir=str(tmp_path / "cache"))
    InferenceSession(model, device="cpu", exec_policy=policy)
    _ort_cache(tmp_path).write_bytes(b"")
    sess = InferenceSession(model, device="cpu", exec_policy=policy)
    entry = sess.record().cache[ORT_KIND]
    assert entry["hit"] is False
    assert "damaged (model.onnx has 0 bytes" in entry["explanation"]


def test_unusable_cache_dir_follows_the_fallback_mode(tmp_path: Path, make_mlp: Any) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    with pytest.raises(FallbackError, match="cannot hold new entries"):
        InferenceSession(
            model,
            device="cpu",
            exec_policy=ExecutionPolicy(cache_dir=str(blocked), fallback="error"),
        )
    sess = InferenceSession(
        model, device="cpu", exec_policy=ExecutionPolicy(cache_dir=str(blocked), fallback="allow")
    )
    (fallback,) = sess.record().fallbacks
    assert fallback.what == f"cache {ORT_KIND}"
    assert fallback.chosen == "no cache"
    assert sess.record().cache[ORT_KIND]["explanation"].startswith("disabled:")
    assert sess.run({"input": np.ones((1, 4), np.float32)})["output"].shape == (1, 3)
