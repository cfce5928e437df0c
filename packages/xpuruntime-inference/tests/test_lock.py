"""Decision lockfiles in inference: record then replay in fresh processes, locks from another
machine under error/warn/allow, missing signatures, tampered locks, training carry-over, CLI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.cli import main
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.lock import (
    LockedChoice,
    Lockfile,
    LockfileTamperedError,
    environment_key,
)
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.lockstore import current_environment, new_entry
from xpuruntime.runtime.record import FallbackWarning

RUN = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from xpuruntime.inference import InferenceSession
    from xpuruntime.policies import ExecutionPolicy

    model, mode, lock = sys.argv[1:4]
    policy = ExecutionPolicy(lock=mode, lock_file=lock, fallback="error")
    sess = InferenceSession(model, device="cpu", exec_policy=policy)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    out = sess.run({"input": x})["output"]
    record = sess.record()
    print(json.dumps({
        "output": out.tolist(),
        "decisions": [[d.op, d.kernel, d.status] for d in record.decisions],
        "fallbacks": len(record.fallbacks),
    }))
    """
)


def _fresh_process(model: Path, mode: str, lock: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(model), mode, str(lock)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _policy(mode: str, lock: Path, fallback: str = "warn") -> ExecutionPolicy:
    return ExecutionPolicy(lock=mode, lock_file=str(lock), fallback=fallback)  # type: ignore[arg-type]


def _record(model: Path, lock: Path) -> None:
    InferenceSession(model, device="cpu", exec_policy=_policy("record", lock))


def test_record_then_replay_in_fresh_processes(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "decisions.lock.json"
    recorded = _fresh_process(mlp, "record", lock)
    assert recorded["decisions"] == [["session", "CPUExecutionProvider", "decided"]]
    replays = [_fresh_process(mlp, "replay", lock) for _ in range(2)]
    for replayed in replays:
        assert replayed["decisions"] == [["session", "CPUExecutionProvider", "locked"]]
        assert replayed["fallbacks"] == 0
        assert replayed["output"] == recorded["output"]
    entry = Lockfile.load(lock).domain("onnxruntime")[0]
    assert entry.choice.options["providers"] == ["CPUExecutionProvider"]
    assert entry.choice.options["graph_optimization_level"] == "ORT_ENABLE_ALL"


def _as_other_machine(lock: Path) -> None:
    def other(fingerprint: dict[str, Any]) -> dict[str, Any]:
        packages = dict(fingerprint["packages"])
        for name in ("onnxruntime", "onnxruntime-gpu", "openvino"):
            if name in packages:
                packages[name] = "0.0.1"
        return {**fingerprint, "machine": "riscv64", "packages": packages}

    Lockfile.load(lock).map_environments(other).save(lock)


def test_lock_from_another_machine_raises_under_error(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    _as_other_machine(lock)
    with pytest.raises(FallbackError, match="locked in another environment: onnxruntime changed"):
        InferenceSession(mlp, device="cpu", exec_policy=_policy("replay", lock, "error"))


def test_lock_from_another_machine_warns_and_records_under_warn(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    _as_other_machine(lock)
    with pytest.warns(FallbackWarning, match="other CPU architecture"):
        sess = InferenceSession(mlp, device="cpu", exec_policy=_policy("replay", lock, "warn"))
    record = sess.record()
    assert [f.mode for f in record.fallbacks] == ["warn"]
    assert [d.status for d in record.decisions] == ["fallen_back"]
    assert "fallen_back" in sess.explain()


def test_lock_from_another_machine_records_silently_under_allow(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    _as_other_machine(lock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = InferenceSession(mlp, device="cpu", exec_policy=_policy("replay", lock, "allow"))
    (fallback,) = sess.record().fallbacks
    assert fallback.mode == "allow"
    assert "onnxruntime changed" in fallback.reason
    out = sess.run({"input": np.ones((1, 4), np.float32)})["output"]
    assert out.shape == (1, 3)


def test_signature_missing_from_the_lock_is_a_fallback(
    mlp: Path, two_inputs: Path, tmp_path: Path
) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    with pytest.raises(FallbackError, match="not in the lockfile"):
        InferenceSession(two_inputs, device="cpu", exec_policy=_policy("replay", lock, "error"))


def test_tampered_lock_is_refused(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    lock.write_text(lock.read_text().replace("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"))
    with pytest.raises(LockfileTamperedError, match="edited or damaged"):
        InferenceSession(mlp, device="cpu", exec_policy=_policy("replay", lock))


def test_locked_option_contradicting_the_policy_falls_back(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    policy = _policy("replay", lock, "allow").replace(graph_optimization="basic")
    sess = InferenceSession(mlp, device="cpu", exec_policy=policy)
    (fallback,) = sess.record().fallbacks
    assert "graph_optimization_level: locked 'ORT_ENABLE_ALL', runs with 'ORT_ENABLE_BASIC'" in (
        fallback.reason
    )
    assert any("recorded under policy" in note for note in sess.record().notes)


def test_training_decisions_say_what_the_engine_cannot_express(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    _record(mlp, lock)
    policy = ExecutionPolicy()
    training = [
        new_entry(
            "pytorch",
            "attention",
            LockedChoice(backend="flash_v2"),
            policy=policy,
            shape="q=1x2x8x16,k=1x2x8x16,v=1x2x8x16",
            dtype="float16",
            device="cuda:0",
        ),
        new_entry(
            "core",
            "matmul",
            LockedChoice(kernel="cublasLt", algorithm={"algo_id": 6}),
            policy=policy,
            shape="[64, 64, 64]",
            dtype="float16",
            device="cuda:0",
        ),
    ]
    Lockfile.load(lock).with_entries(training, current_environment()).save(lock)
    sess = InferenceSession(mlp, device="cpu", exec_policy=_policy("replay", lock, "error"))
    carried = {s.name: s for s in sess.record().settings if s.name.startswith("lock.carry_over")}
    attention = carried["lock.carry_over.pytorch.attention_calls"]
    assert attention.requested == "flash_v2"
    assert not attention.honoured
    assert "sdpa_kernel" in attention.note
    matmul = carried["lock.carry_over.core.matmul_calls"]
    assert not matmul.honoured
    assert "cuBLASLt algorithm" in matmul.note


def test_environment_key_matches_the_record_fingerprint_hash(mlp: Path) -> None:
    sess = InferenceSession(mlp, device="cpu")
    record = sess.record()
    assert record.environment_hash == environment_key(record.environment)


def test_cli_lock_record_replay_show_diff(mlp: Path, tmp_path: Path) -> None:
    lock = tmp_path / "cli.lock.json"
    runner = CliRunner()
    recorded = runner.invoke(
        main,
        ["lock", "record", str(mlp), "--lock", str(lock), "--device", "cpu", "--dim", "batch=2"],
    )
    assert recorded.exit_code == 0, recorded.output
    assert "decided" in recorded.output
    replayed = runner.invoke(
        main,
        ["lock", "replay", str(mlp), "--lock", str(lock), "--device", "cpu", "--dim", "batch=2"],
    )
    assert replayed.exit_code == 0, replayed.output
    assert "1 locked, 0 fell back" in replayed.output
    shown = runner.invoke(main, ["lock", "show", str(lock)])
    assert shown.exit_code == 0, shown.output
    assert "onnxruntime" in shown.output
    here = runner.invoke(main, ["lock", "diff", str(lock)], env={"COLUMNS": "200"})
    assert "1 of 1 decisions would replay here" in here.output
    other = tmp_path / "other.lock.json"
    other.write_text(lock.read_text())
    _as_other_machine(other)
    there = runner.invoke(main, ["lock", "diff", str(other)], env={"COLUMNS": "200"})
    assert "0 of 1 decisions would replay here" in there.output
    assert "onnxruntime changed" in there.output
    same = runner.invoke(main, ["lock", "diff", str(lock), str(other)])
    assert "no differences" in same.output
    run = runner.invoke(
        main, ["run", str(mlp), "--device", "cpu", "--dim", "batch=2", "--lock", str(other)]
    )
    assert run.exit_code == 0, run.output
    assert "FallbackWarning" in run.output
    strict = runner.invoke(
        main,
        [
            "run",
            str(mlp),
            "--device",
            "cpu",
            "--dim",
            "batch=2",
            "--lock",
            str(other),
            "--fallback",
            "error",
        ],
    )
    assert strict.exit_code != 0
    assert "FallbackError" in strict.output
    tampered = tmp_path / "tampered.json"
    tampered.write_text(lock.read_text().replace("CPUExecutionProvider", "CUDAExecutionProvider"))
    bad = runner.invoke(main, ["lock", "show", str(tampered)])
    assert bad.exit_code != 0
    assert "LockfileTamperedError" in bad.output


@pytest.mark.gpu
def test_cuda_execution_provider_options_are_locked_and_replayed(
    mlp: Path, tmp_path: Path, cuda_ep: None
) -> None:
    lock = tmp_path / "cuda.lock.json"
    policy = ExecutionPolicy(lock="record", lock_file=str(lock), fallback="error")
    recorded = InferenceSession(mlp, device="cuda:0", exec_policy=policy)
    x = np.ones((2, 4), np.float32)
    expected = recorded.run({"input": x})["output"]
    (entry,) = Lockfile.load(lock).domain("onnxruntime")
    options = entry.choice.options
    assert options["providers"][0] == "CUDAExecutionProvider"
    assert options["CUDAExecutionProvider.cudnn_conv_algo_search"] == "EXHAUSTIVE"
    assert options["CUDAExecutionProvider.use_tf32"] == "0"
    replayed = InferenceSession(mlp, device="cuda:0", exec_policy=policy.replace(lock="replay"))
    assert [d.status for d in replayed.record().decisions] == ["locked"]
    np.testing.assert_array_equal(np.asarray(replayed.run({"input": x})["output"]), expected)


@pytest.mark.tensorrt
@pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is None, reason="tensorrt is not installed"
)
def test_tensorrt_timing_cache_is_the_tactic_lock(mlp: Path, tmp_path: Path) -> None:
    from xpuruntime.inference.engines.tensorrt import TensorRTEngine
    from xpuruntime.policies.lock import artifact_folder

    if not TensorRTEngine.availability().available:
        pytest.skip(TensorRTEngine.availability().reason)
    lock = tmp_path / "trt.lock.json"
    policy = ExecutionPolicy(
        lock="record", lock_file=str(lock), fallback="error", input_shapes={"input": [4, 4]}
    )
    recorded = InferenceSession(mlp, device="cuda:0", engine="tensorrt", exec_policy=policy)
    x = np.ones((4, 4), np.float32)
    expected = np.asarray(recorded.run({"input": x})["output"])
    (entry,) = Lockfile.load(lock).domain("tensorrt")
    assert entry.choice.artifact is not None
    assert entry.choice.artifact.kind == "tensorrt-timing-cache"
    assert (artifact_folder(lock) / entry.choice.artifact.file).stat().st_size > 0
    replayed = InferenceSession(
        mlp, device="cuda:0", engine="tensorrt", exec_policy=policy.replace(lock="replay")
    )
    assert [d.status for d in replayed.record().decisions] == ["locked"]
    np.testing.assert_allclose(np.asarray(replayed.run({"input": x})["output"]), expected)
