"""The packaged demo model: reproducible from its script, and ``xpuruntime demo`` runs it."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.cli import main
from xpuruntime.inference.demo import DEMO_MODEL, demo_images

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "make_demo_model.py"


def test_script_reproduces_the_packaged_model_byte_for_byte() -> None:
    build = runpy.run_path(str(SCRIPT))["build_demo_model"]
    assert build().SerializeToString(deterministic=True) == DEMO_MODEL.read_bytes()


def test_demo_model_runs_and_classifies() -> None:
    sess = InferenceSession(DEMO_MODEL, device="cpu")
    probabilities = sess.run({"image": demo_images(8)})["probabilities"]
    assert probabilities.shape == (8, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    # Repeating patterns give the same prediction (images differ only by small noise).
    assert (probabilities[:4].argmax(1) == probabilities[4:].argmax(1)).all()


def test_demo_command_prints_outputs_and_record(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    result = CliRunner().invoke(main, ["demo", "--json-out", str(record)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for expected in (
        "xpuruntime demo",
        "Predictions",
        "vertical bar",
        "Execution record",
        "CPUExecutionProvider",
        "Conv",
    ):
        assert expected in result.output, expected
    assert record.is_file()
