"""The lockfile document: round trips, hashing, tampering, malformed files, diffs, schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.policies.bundle import BundleError, BundleManifest, file_sha256, read_manifest
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.policies.lock import (
    Candidate,
    LockedChoice,
    LockEntry,
    Lockfile,
    LockfileError,
    LockfileTamperedError,
    diff_locks,
    environment_key,
    lock_json_schema,
    served_policy_hash,
)

H100 = {
    "gpu": ["NVIDIA H100 80GB HBM3"],
    "gpus": [{"name": "NVIDIA H100", "compute_capability": "9.0"}],
}
H200 = {"gpu": ["NVIDIA H200"], "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}]}


def _entry(environment: dict[str, Any], shape: str = "[64, 64, 64]", algo: int = 6) -> LockEntry:
    return LockEntry(
        domain="core",
        op="matmul",
        shape=shape,
        dtype="float16",
        device="cuda:0",
        layout="NN",
        choice=LockedChoice(kernel="cublasLt", algorithm={"algo_id": algo, "tile": 18}),
        candidates=[Candidate(name="heuristic rank 0", ms=0.011, algorithm={"algo_id": algo})],
        mode="auto",
        strategy="BestPerformance",
        reason="fastest measured",
        policy_hash="0" * 64,
        environment=environment_key(environment),
    )


def _lock(*entries: LockEntry, environment: dict[str, Any] = H100) -> Lockfile:
    return Lockfile(entries, {environment_key(environment): environment})


def test_round_trip_is_byte_identical(tmp_path: Path) -> None:
    first = _entry(H100)
    lock = _lock(first, _entry(H100, "[128, 64, 32]", 21))
    path = lock.save(tmp_path / "decisions.lock.json")
    again = Lockfile.load(path)
    assert again == lock
    assert again.dumps() == lock.dumps()
    (found,) = again.find(first.signature)
    assert found == first
    assert found.choice.algorithm == {"algo_id": 6, "tile": 18}


def test_hash_does_not_depend_on_entry_order() -> None:
    a, b = _entry(H100), _entry(H100, "[128, 64, 32]", 21)
    assert _lock(a, b).content_hash() == _lock(b, a).content_hash()
    assert _lock(a).content_hash() != _lock(b).content_hash()


def test_a_decision_for_the_same_signature_and_environment_replaces_the_older() -> None:
    lock = _lock(_entry(H100, algo=6)).with_entries([_entry(H100, algo=7)], H100)
    assert len(lock) == 1
    assert lock.entries[0].choice.algorithm == {"algo_id": 7, "tile": 18}
    # Another environment keeps its own decision for the same signature.
    both = lock.with_entries([_entry(H200, algo=9)], H200)
    assert len(both) == 2
    assert len(both.find(lock.entries[0].signature)) == 2


def test_edited_decision_is_refused_as_tampered(tmp_path: Path) -> None:
    path = _lock(_entry(H100)).save(tmp_path / "lock.json")
    text = path.read_text().replace('"algo_id": 6', '"algo_id": 7')
    path.write_text(text)
    with pytest.raises(LockfileTamperedError, match="edited or damaged"):
        Lockfile.load(path)


def test_edited_fingerprint_is_refused_as_tampered(tmp_path: Path) -> None:
    lock = _lock(_entry(H100))
    data = lock.to_dict()
    key = next(iter(data["environments"]))
    data["environments"][key]["gpu"] = ["NVIDIA H200"]
    # Even with the document hash recomputed, the fingerprint no longer hashes to its key.
    body = {k: v for k, v in data.items() if k != "content_hash"}
    import hashlib

    import msgspec

    data["content_hash"] = hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()
    with pytest.raises(LockfileTamperedError, match="does not hash to its key"):
        Lockfile.from_dict(data, source="lock.json")


def test_map_environments_makes_a_valid_lock_from_another_machine() -> None:
    other = _lock(_entry(H100)).map_environments(lambda fp: {**fp, "gpu": ["NVIDIA H200"]})
    assert Lockfile.loads(other.dumps()) == other
    fingerprint = other.environments[other.entries[0].environment]
    assert fingerprint["gpu"] == ["NVIDIA H200"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "malformed JSON"),
        ("[1, 2]", "a lockfile is a JSON object"),
        ('{"schema_version": 1}', "not a valid lockfile"),
        ('{"schema_version": 2, "entries": []}', "schema_version 2 is not readable here"),
        ('{"schema_version": 1, "schema_version": 1}', "duplicate key"),
        (
            '{"schema_version": 1, "content_hash": "abc", "environments": {}, "entries": []}',
            "not a valid lockfile",
        ),
    ],
)
def test_malformed_lockfiles_raise_a_clear_typed_error(text: str, message: str) -> None:
    with pytest.raises(LockfileError, match=message) as caught:
        Lockfile.loads(text, source="bad.json")
    assert isinstance(caught.value, XpuRuntimeError)
    assert "bad.json" in str(caught.value)


def test_missing_lockfile_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(LockfileError, match="record one first"):
        Lockfile.load(tmp_path / "absent.json")


def test_entry_naming_an_unknown_environment_is_refused() -> None:
    with pytest.raises(LockfileError, match="does not hold"):
        Lockfile([_entry(H100)], {})


def test_diff_names_added_removed_and_changed_decisions() -> None:
    old = _lock(_entry(H100, algo=6), _entry(H100, "[8, 8, 8]"))
    new = _lock(_entry(H100, algo=7), _entry(H100, "[16, 16, 16]"))
    changes = {change.kind: change for change in diff_locks(old, new)}
    assert set(changes) == {"added", "removed", "changed"}
    assert '"algo_id":6' in changes["changed"].old
    assert '"algo_id":7' in changes["changed"].new
    assert not diff_locks(old, old)
    assert str(diff_locks(old, old)) == "no differences"


def test_written_lockfile_matches_its_json_schema() -> None:
    data = json.loads(_lock(_entry(H100)).dumps())
    jsonschema.validate(data, lock_json_schema())
    data["entries"][0]["domain"] = "cudnn"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, lock_json_schema())


def test_served_policy_hash_ignores_the_lock_settings() -> None:
    base = ExecutionPolicy(precision="fp16", kernel_policy=KernelPolicy(matmul="cublasLt"))
    recording = base.replace(lock="record", lock_file="a.json")
    replaying = base.replace(lock="replay", lock_file="b.json")
    assert served_policy_hash(recording) == served_policy_hash(replaying)
    assert served_policy_hash(base) != served_policy_hash(base.replace(precision="fp32"))


def test_bundle_manifest_detects_changed_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"model")
    BundleManifest(
        inputs=["x"],
        outputs=["y"],
        rtol=1e-3,
        atol=1e-5,
        files={"model.onnx": file_sha256(tmp_path / "model.onnx")},
    ).save(tmp_path)
    assert read_manifest(tmp_path).inputs == ["x"]
    (tmp_path / "model.onnx").write_bytes(b"other model")
    with pytest.raises(BundleError, match="does not match the digest"):
        read_manifest(tmp_path)
    (tmp_path / "model.onnx").unlink()
    with pytest.raises(BundleError, match="missing"):
        read_manifest(tmp_path)
    with pytest.raises(BundleError, match="not a model bundle"):
        read_manifest(tmp_path / "nowhere")
