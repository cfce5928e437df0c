"""A model bundle's round trip: a small PyTorch model trained under a recorded lock, exported
with xpuruntime.pytorch.export, opened with InferenceSession(bundle_dir) and verified.

Needs PyTorch, onnxscript and ONNX Runtime together: `nox -s "backends(backend='torch-cpu')"`.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("torch", "onnxscript", "onnxruntime")),
        reason="needs torch, onnxscript and onnxruntime (nox backends torch-cpu)",
    ),
    # torch.onnx's exporter trips over its own pytree deprecations (torch 2.13).
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]


def _model() -> object:
    import torch

    from xpuruntime.pytorch.ops import fused_attention

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.project = torch.nn.Linear(32, 32)
            self.norm = torch.nn.LayerNorm(32)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            attended = fused_attention(x, x, x, is_causal=True)
            hidden = self.norm(self.project(attended))
            return hidden.relu(), hidden.mean(dim=-1)

    torch.manual_seed(0)
    return Block().eval()


def test_bundle_round_trip_verifies(tmp_path: Path) -> None:
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.runtime.record import FallbackWarning

    model = _model()
    example = torch.randn(1, 2, 8, 32)
    lock = tmp_path / "training.lock.json"
    policy = xrt.ExecutionPolicy(lock="record", lock_file=str(lock))
    with xrt_torch.kernel_policy(exec_policy=policy):
        model(example)  # type: ignore[operator]  # training decisions go into the lock
        bundle = xrt_torch.export(model, (example,), tmp_path / "bundle")  # type: ignore[arg-type]

    names = sorted(p.name for p in bundle.iterdir())
    assert names == [
        "bundle.json",
        "environment.json",
        "lock.json",
        "model.onnx",
        "policy.json",
        "reference.npz",
    ]
    with warnings.catch_warnings():
        # A training lock holds no engine decisions: ONNX Runtime decides, recorded, no
        # fallback (the lock never demands entries it never had).
        warnings.simplefilter("error", FallbackWarning)
        sess = xrt.InferenceSession(str(bundle), device="cpu")
    report = sess.verify()
    assert report.passed
    assert [c.tensor for c in report.outputs] == sess.output_names

    record = sess.record()
    carried = {s.name: s for s in record.settings if s.name.startswith("lock.carry_over.")}
    attention = carried["lock.carry_over.pytorch.attention_calls"]
    assert attention.requested == "flash_v2"
    assert not attention.honoured
    assert "sdpa_kernel" in attention.note
    assert any(note.startswith(f"bundle {bundle}") for note in record.notes)
    assert "lock.carry_over" in sess.explain(width=200)
    (engine,) = [d for d in record.decisions if d.op == "session" and d.mode == "lock"]
    assert engine.status == "decided"
    assert "holds no onnxruntime decisions" in engine.reason


def test_inference_lock_recorded_for_the_bundle_is_replayed(tmp_path: Path) -> None:
    """A lockfile that holds the engine's own decisions is demanded on replay: a missing
    entry for this engine is then a fallback, as for any lock."""
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.runtime.errors import FallbackError

    bundle = xrt_torch.export(_model(), (torch.randn(2, 2, 8, 32),), tmp_path / "b")  # type: ignore[arg-type]
    lock = tmp_path / "serving.lock.json"
    record = xrt.ExecutionPolicy(lock="record", lock_file=str(lock))
    xrt.InferenceSession(str(bundle), device="cpu", exec_policy=record).verify()
    replay = xrt.ExecutionPolicy(lock="replay", lock_file=str(lock), fallback="error")
    sess = xrt.InferenceSession(str(bundle), device="cpu", exec_policy=replay)
    (decision,) = [d for d in sess.record().decisions if d.op == "session" and d.mode == "lock"]
    assert decision.status == "locked"
    changed = _model()
    with torch.no_grad():
        changed.project.bias += 1.0  # type: ignore[attr-defined]  # another model: another digest
    other = xrt_torch.export(changed, (torch.randn(2, 2, 8, 32),), tmp_path / "b2")  # type: ignore[arg-type]
    with pytest.raises(FallbackError, match="not in the lockfile"):
        xrt.InferenceSession(str(other), device="cpu", exec_policy=replay)


def test_bundle_with_changed_model_is_refused(tmp_path: Path) -> None:
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.policies.bundle import BundleError

    bundle = xrt_torch.export(_model(), (torch.randn(1, 2, 8, 32),), tmp_path / "b")  # type: ignore[arg-type]
    with (bundle / "model.onnx").open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(BundleError, match=r"model\.onnx does not match"):
        xrt.InferenceSession(str(bundle), device="cpu")


def _mismatched(bundle: Path) -> None:
    """Give ``bundle`` one reference output the model does not reproduce (re-signed, so the
    bundle itself stays valid)."""
    import msgspec

    from xpuruntime.policies.bundle import BundleManifest, file_sha256

    reference = bundle / "reference.npz"
    with np.load(reference) as data:
        arrays = {name: data[name] for name in data.files}
    first = next(name for name in arrays if name.startswith("output/"))
    arrays[first] = arrays[first] + 1.0
    np.savez(reference, **arrays)
    stored = msgspec.json.decode((bundle / "bundle.json").read_bytes(), type=BundleManifest)
    files = {**stored.files, "reference.npz": file_sha256(reference)}
    msgspec.structs.replace(stored, files=files).save(bundle)


def test_verify_reports_outputs_beyond_tolerance(tmp_path: Path) -> None:
    import torch

    import xpuruntime as xrt
    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.inference.bundle import VerificationError

    bundle = xrt_torch.export(_model(), (torch.randn(1, 2, 8, 32),), tmp_path / "b")  # type: ignore[arg-type]
    _mismatched(bundle)
    sess = xrt.InferenceSession(str(bundle), device="cpu")
    report = sess.verify(raise_on_failure=False)
    assert not report.passed
    assert [c.passed for c in report.outputs].count(False) == 1
    with pytest.raises(VerificationError, match="DIFFERS"):
        sess.verify()
    assert sess.verify(atol=2.0).passed


def test_bundle_verify_command(tmp_path: Path) -> None:
    """``xpuruntime bundle verify``: 0 when the engine reproduces the bundle, 1 naming the
    worst tensor when it does not, 2 for a folder that is not a bundle."""
    import torch
    from click.testing import CliRunner

    import xpuruntime.pytorch as xrt_torch
    from xpuruntime.inference.cli import main

    bundle = xrt_torch.export(_model(), (torch.randn(2, 2, 8, 32),), tmp_path / "b")  # type: ignore[arg-type]
    runner = CliRunner()
    ok = runner.invoke(main, ["bundle", "verify", str(bundle), "--engine", "onnxruntime"])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith("passed: onnxruntime on cpu")
    _mismatched(bundle)
    bad = runner.invoke(main, ["bundle", "verify", str(bundle), "--json-out", "-"])
    assert bad.exit_code == 1
    assert '"passed":false' in bad.stdout.replace(" ", "")
    (worst,) = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert "differs most: max abs 1" in worst
    assert runner.invoke(main, ["bundle", "verify", str(bundle), "--atol", "2"]).exit_code == 0
    assert runner.invoke(main, ["bundle", "verify", str(tmp_path / "none")]).exit_code == 2
    not_a_bundle = runner.invoke(main, ["bundle", "verify", str(tmp_path)])
    assert not_a_bundle.exit_code == 2
    assert "bundle.json is missing" in not_a_bundle.stderr
