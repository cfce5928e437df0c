"""Never stricter than the engine: ``run`` raises if and only if raw ONNX Runtime raises.

Random small models (declared shapes with fixed sizes, real names, exporters' placeholders,
unnamed axes, or no shape at all; several element types) get random feeds (right or wrong
names, element types, ranks and sizes, numpy arrays or nested lists). Raw
``onnxruntime.InferenceSession`` and ``xpuruntime.InferenceSession`` run the same feeds on the
CPU: either both run, with equal outputs, or both raise, and xpuruntime's error is typed.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from xpuruntime.inference import InferenceSession, InputShapeWarning
from xpuruntime.policies.errors import XpuRuntimeError

ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime: pip install 'xpuruntime[cpu]'")

TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.INT64: np.int64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.BOOL: np.bool_,
    TensorProto.UINT8: np.uint8,
}
SYMBOLS = ["batch", "seq", "?", "", "unk__3", "-1"]

dims = st.one_of(
    st.integers(min_value=1, max_value=3),
    st.sampled_from(SYMBOLS),
    st.none(),
)
declared_inputs = st.lists(
    st.tuples(
        st.sampled_from(list(TYPES)),
        st.one_of(st.none(), st.lists(dims, max_size=3)),
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def model_and_feeds(draw: Any) -> tuple[list[Any], dict[str, Any]]:
    declared = [(f"in{i}", t, d) for i, (t, d) in enumerate(draw(declared_inputs))]
    feeds: dict[str, Any] = {}
    for name, elem_type, shape in declared:
        if draw(st.integers(0, 9)) == 0:
            continue  # a missing input
        dtype = (
            TYPES[elem_type]
            if draw(st.integers(0, 4))
            else draw(st.sampled_from(list(TYPES.values())))
        )
        if shape is not None and draw(st.integers(0, 3)):
            # Mostly the declared rank, with sizes that may or may not fit the declaration.
            sizes = [
                d if isinstance(d, int) and draw(st.integers(0, 3)) else draw(st.integers(0, 3))
                for d in shape
            ]
        else:
            sizes = draw(st.lists(st.integers(0, 3), max_size=3))
        value = np.zeros(sizes, dtype)
        feeds[name] = value.tolist() if value.ndim and draw(st.integers(0, 4)) == 0 else value
    if draw(st.integers(0, 9)) == 0:
        feeds["unknown"] = np.zeros(1, np.float32)
    return declared, feeds


def _raw(path: Path, feeds: dict[str, Any]) -> list[Any] | Exception:
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return list(session.run(None, dict(feeds)))
    except Exception as exc:
        return exc


def _xrt(path: Path, feeds: dict[str, Any]) -> list[Any] | Exception:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InputShapeWarning)
            session = InferenceSession(path, device="cpu")
            out = session.run(feeds)
        return [out[o] for o in session.output_names]
    except Exception as exc:
        return exc


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=model_and_feeds())
def test_run_raises_if_and_only_if_onnxruntime_raises(
    tmp_path: Path, make_passthrough: Any, case: tuple[list[Any], dict[str, Any]]
) -> None:
    declared, feeds = case
    path = make_passthrough(tmp_path / "model.onnx", declared)
    raw, ours = _raw(path, feeds), _xrt(path, feeds)
    event(f"onnxruntime {'raises' if isinstance(raw, Exception) else 'runs'}")
    if isinstance(raw, Exception):
        assert isinstance(ours, XpuRuntimeError), f"raw ONNX Runtime raised {raw!r}; we: {ours!r}"
        return
    assert not isinstance(ours, Exception), f"raw ONNX Runtime ran; we raised {ours!r}"
    for got, want in zip(ours, raw, strict=True):
        np.testing.assert_array_equal(got, want)
