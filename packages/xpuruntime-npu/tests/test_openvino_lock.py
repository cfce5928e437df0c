"""OpenVINO under a decision lockfile: the compiled blob recorded as an artifact and imported
on replay; a damaged blob, or a lock from another OpenVINO release, goes through the fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "openvino", reason="openvino is not installed: pip install 'xpuruntime-npu[openvino]'"
)

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.lock import Lockfile, LockfileTamperedError, artifact_folder
from xpuruntime.runtime.errors import FallbackError


def _session(model: Path, mode: str, lock: Path, fallback: str = "error") -> InferenceSession:
    policy = ExecutionPolicy(lock=mode, lock_file=str(lock), fallback=fallback)  # type: ignore[arg-type]
    return InferenceSession(model, device="cpu", engine="openvino", exec_policy=policy)


def test_compiled_blob_is_recorded_and_replayed(cnn: Path, tmp_path: Path) -> None:
    lock = tmp_path / "ov.lock.json"
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    recorded = _session(cnn, "record", lock)
    expected = recorded.run(feeds)
    (entry,) = Lockfile.load(lock).domain("openvino")
    assert entry.choice.artifact is not None
    assert entry.choice.artifact.kind == "openvino-blob"
    assert entry.choice.options["EXECUTION_DEVICES"] == "['CPU']"
    assert (artifact_folder(lock) / entry.choice.artifact.file).is_file()

    replayed = _session(cnn, "replay", lock)
    (decision,) = replayed.record().decisions
    assert decision.status == "locked"
    assert decision.kernel == "CPU + openvino-blob"  # the blob was imported, not compiled
    for name, want in expected.items():
        np.testing.assert_array_equal(replayed.run(feeds)[name], want)


def test_replaced_blob_is_refused(cnn: Path, tmp_path: Path) -> None:
    lock = tmp_path / "ov.lock.json"
    _session(cnn, "record", lock)
    (blob,) = artifact_folder(lock).iterdir()
    blob.write_bytes(blob.read_bytes()[:-1] + b"\0")
    with pytest.raises(LockfileTamperedError, match="does not match the digest"):
        _session(cnn, "replay", lock)


def test_lock_from_another_openvino_release_falls_back(cnn: Path, tmp_path: Path) -> None:
    lock = tmp_path / "ov.lock.json"
    _session(cnn, "record", lock)
    Lockfile.load(lock).map_environments(
        lambda fp: {**fp, "packages": {**fp["packages"], "openvino": "2020.1"}}
    ).save(lock)
    with pytest.raises(FallbackError, match=r"openvino changed: locked with openvino 2020\.1"):
        _session(cnn, "replay", lock)
    allowed = _session(cnn, "replay", lock, fallback="allow")
    assert [d.status for d in allowed.record().decisions] == ["fallen_back"]
