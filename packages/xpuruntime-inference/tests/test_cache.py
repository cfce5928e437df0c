"""Content-addressed caches: keys from content, and a miss that says what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from xpuruntime.inference import CacheKey, ContentCache, InferenceSession
from xpuruntime.policies import ExecutionPolicy


def key(**changes: str) -> CacheKey:
    components = {
        "model": "a" * 64,
        "policy": "b" * 64,
        "environment": "c" * 64,
        "engine": "onnxruntime 1.0",
    }
    return CacheKey("demo", {**components, **changes})


def test_digest_depends_on_content_only() -> None:
    assert key().digest == key().digest
    reordered = CacheKey("demo", dict(reversed(list(key().components.items()))))
    assert reordered.digest == key().digest
    assert key(model="d" * 64).digest != key().digest


def test_miss_names_the_changed_component(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path, "demo")
    first = cache.lookup(key())
    assert not first.hit
    assert "empty" in first.explanation
    first.commit()
    assert cache.lookup(key()).hit
    miss = cache.lookup(key(environment="e" * 64))
    assert not miss.hit
    assert miss.explanation == (
        "miss: environment changed (cccccccccccc -> eeeeeeeeeeee) (compared with the closest entry)"
    )
    assert "model" not in miss.explanation


def test_onnxruntime_optimized_model_cache(tmp_path: Path, make_mlp: Any) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    policy = ExecutionPolicy(cache_dir=str(tmp_path / "cache"))
    x = {"input": np.ones((2, 4), np.float32)}

    first = InferenceSession(model, device="cpu", exec_policy=policy)
    entry = first.record().cache["onnxruntime-optimized-model"]
    assert entry["hit"] is False
    assert (Path(entry["path"]) / "model.onnx").is_file()

    second = InferenceSession(model, device="cpu", exec_policy=policy)
    hit = second.record().cache["onnxruntime-optimized-model"]
    assert hit["hit"] is True
    assert hit["key"] == entry["key"]
    np.testing.assert_allclose(second.run(x)["output"], first.run(x)["output"], rtol=1e-6)

    make_mlp(model, weight_scale=2.0)  # same path, other bytes
    third = InferenceSession(model, device="cpu", exec_policy=policy)
    miss = third.record().cache["onnxruntime-optimized-model"]
    assert miss["hit"] is False
    assert miss["explanation"].startswith("miss: model changed")
    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(third.run(x)["output"], raw.run(None, x)[0], rtol=1e-6)

    other_policy = InferenceSession(
        model, device="cpu", exec_policy=policy.replace(graph_optimization="basic")
    )
    assert (
        "policy changed"
        in other_policy.record().cache["onnxruntime-optimized-model"]["explanation"]
    )
