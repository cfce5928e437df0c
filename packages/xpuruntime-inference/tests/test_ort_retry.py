"""ONNX Runtime's retry of a run its execution provider failed, through the fallback mode
(:mod:`xpuruntime.inference.kit.ort_retry`, shared by the ONNX Runtime and QNN engines).

No execution provider of a CPU machine fails a run with ``EPFail``, so the failure is an
``EPFail`` of ONNX Runtime's own class handed to the retry of a real session; the QNN
engine's test (packages/xpuruntime-npu/tests/test_qnn_run_retry.py) provokes a real one in
the HTP simulator, and test_gpu.py covers the CUDA session.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.kit.ort_retry import CPU_EP, ProviderRetry
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import ExecutionRecord

EP_FAIL = ort.capi.onnxruntime_pybind11_state.EPFail
X = {"input": np.ones((2, 4), np.float32)}


def _retry(mlp: Path, fallback: str) -> tuple[ProviderRetry, object, ExecutionRecord]:
    session = ort.InferenceSession(str(mlp), providers=[CPU_EP])
    record = ExecutionRecord(kind="inference")
    decisions = Decisions(ExecutionPolicy(fallback=fallback), record=record)
    return ProviderRetry(ort, session, CPU_EP, decisions), session, record


def test_the_silent_retry_of_onnxruntime_is_off(mlp: Path) -> None:
    retry, session, _ = _retry(mlp, "warn")
    assert retry.failure is EP_FAIL
    assert session._enable_fallback is False  # type: ignore[attr-defined]
    engine_session = InferenceSession(mlp, device="cpu").engine_session
    assert engine_session.session._enable_fallback is False  # type: ignore[attr-defined]


def test_fallback_error_refuses_the_move_and_leaves_the_session(mlp: Path) -> None:
    retry, session, _ = _retry(mlp, "error")
    before = session._sess  # type: ignore[attr-defined]
    with pytest.raises(FallbackError, match=r"failed while running .*no kernel image"):
        retry.leave(session, EP_FAIL("no kernel image"))
    assert session._sess is before  # type: ignore[attr-defined]  # not re-created


def test_a_failed_run_moves_the_session_once_and_records_it(mlp: Path) -> None:
    retry, session, record = _retry(mlp, "warn")
    want = session.run(None, X)  # type: ignore[attr-defined]
    with pytest.warns(Warning, match="failed while running"):
        retry.leave(session, EP_FAIL("Failed to setup QNN input tensors"))
    (moved,) = record.fallbacks
    assert (moved.what, moved.requested, moved.chosen) == (
        "execution provider",
        CPU_EP,
        CPU_EP,
    )
    assert "Failed to setup QNN input tensors" in moved.reason
    assert session.get_providers() == [CPU_EP]  # type: ignore[attr-defined]
    np.testing.assert_array_equal(session.run(None, X)[0], want[0])  # type: ignore[attr-defined]
    # A second run that failed on the old provider finds the session moved: no second entry.
    retry.provider = "QNNExecutionProvider"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        retry.leave(session, EP_FAIL("again"))
    assert len(record.fallbacks) == 1
