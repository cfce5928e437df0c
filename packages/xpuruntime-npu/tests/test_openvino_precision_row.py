"""The precision settings row says whether OpenVINO ran the requested precision: the
expectation comes from OpenVINO's own report (OPTIMIZATION_CAPABILITIES), not the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.demo import DEMO_MODEL
from xpuruntime.runtime.record import ExecutionRecord, SettingRecord

ov = pytest.importorskip("openvino")


def _row(record: ExecutionRecord) -> SettingRecord:
    (row,) = [s for s in record.settings if s.name == "precision"]
    return row


@pytest.mark.parametrize(("precision", "capability"), [("bf16", "BF16"), ("fp16", "FP16")])
def test_precision_row_matches_what_openvino_reports(precision: str, capability: str) -> None:
    capable = capability in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    session = InferenceSession(
        Path(DEMO_MODEL), device="cpu", engine="openvino", precision=precision, fallback="allow"
    )
    record = session.record()
    row = _row(record)
    assert row.requested == precision
    assert row.honoured is (row.applied == precision)
    assert row.applied == (precision if capable else "fp32")
    assert record.precision is not None
    assert record.precision.chosen == row.applied
    fell_back = [f for f in record.fallbacks if f.what == "precision"]
    assert bool(fell_back) is (not row.honoured)


def test_precision_row_not_honoured_when_the_compiled_model_runs_f32() -> None:
    # The raw INFERENCE_PRECISION_HINT overrides the kit's on any CPU, capable or not: the
    # compiled model reports f32, so bf16 was not honoured whichever branch the kit took.
    session = InferenceSession(
        Path(DEMO_MODEL),
        device="cpu",
        engine="openvino",
        precision="bf16",
        fallback="allow",
        engine_options={"openvino": {"INFERENCE_PRECISION_HINT": "f32"}},
    )
    record = session.record()
    row = _row(record)
    assert (row.requested, row.applied, row.honoured) == ("bf16", "fp32", False)
    assert record.precision is not None
    assert record.precision.chosen == "fp32"
    assert [f.chosen for f in record.fallbacks if f.what == "precision"] == ["fp32"]
