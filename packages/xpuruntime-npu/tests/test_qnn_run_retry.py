"""A QNN graph that builds but fails every run, in the HTP simulator: ONNX Runtime's silent
CPU retry is replaced by the kit's (xpuruntime.inference.kit.ort_retry), which goes through
the fallback mode, says so once in the record and prints nothing.

ddddocr's captcha model (a public model from the package index, fetched by
``python scripts/fetch_public_models.py build/public-models``) with its width fixed: QNN builds
its graph from the model's declared output shape ([1, 19], stale for other widths) and the
QNN EP fails each run with EPFail ("ORT Tensor data size does not match QNN tensor data
size").
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "onnxruntime_qnn", reason="onnxruntime-qnn is not installed: pip install 'xpuruntime-npu[qnn]'"
)

from xpuruntime.inference import InferenceSession
from xpuruntime.runtime.record import FallbackWarning

ROOT = Path(__file__).resolve().parents[3]
PUBLIC = Path(os.environ.get("XPURUNTIME_PUBLIC_MODELS", ROOT / "build" / "public-models"))
QNN_EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"


@pytest.fixture
def ddddocr() -> Path:
    path = PUBLIC / "ddddocr.onnx"
    if not path.is_file():
        pytest.skip(f"ddddocr not fetched: python scripts/fetch_public_models.py {PUBLIC}")
    return path


def test_a_run_the_qnn_ep_fails_moves_to_the_cpu_ep_once_through_the_fallback_mode(
    ddddocr: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((1, 1, 64, 128)).astype(np.float32)
    want = ort.InferenceSession(str(ddddocr), providers=[CPU_EP]).run(None, {"input1": x})[0]
    # ConvInteger & co. stay on the CPU EP (QNN has no such operations): a fallback at build.
    with pytest.warns(FallbackWarning, match="ConvInteger"):
        sess = InferenceSession(
            ddddocr, engine="qnn", device="cpu", input_shapes={"input1": [1, 1, 64, 128]},
            static_shape=True, fallback="warn", engine_options={"qnn": {"soc_model": "69"}},
        )  # fmt: skip
    built = len(sess.record().fallbacks)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = sess.run({"input1": x})["output"]
    moved = [f for f in sess.record().fallbacks[built:] if f.what == "execution provider"]
    if not moved:  # a QNN release that runs it: nothing to retry
        np.testing.assert_array_equal(first, want)
        pytest.skip("this onnxruntime-qnn runs the stale-shape graph: no run-time EP failure")
    (move,) = moved
    assert (move.requested, move.chosen) == (QNN_EP, CPU_EP)
    assert "failed while running" in move.reason
    assert "EP_FAIL" in move.reason or "data size" in move.reason, move.reason
    assert any(issubclass(w.category, FallbackWarning) for w in caught), caught
    # ONNX Runtime's own retry prints "EP Error ... Falling back"; the kit's prints nothing.
    assert "Falling back" not in capfd.readouterr().out
    np.testing.assert_array_equal(first, want)
    assert sess.engine_session._session.get_providers() == [CPU_EP]
    # Later runs run on the CPU EP without failing again: no second entry, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        np.testing.assert_array_equal(sess.run({"input1": x})["output"], want)
    assert len(sess.record().fallbacks) == built + 1
