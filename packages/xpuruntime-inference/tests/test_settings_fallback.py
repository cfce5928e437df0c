"""A setting a policy layer set explicitly that the engine records as not honoured goes
through the fallback rule (kit, every engine); one left at its default does not. The policy
sources table shows one row per setting and agrees with the precision choice."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.demo import DEMO_MODEL
from xpuruntime.inference.report import render_text
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import ExecutionRecord

_UNHONOURED: list[tuple[str, dict[str, Any], str]] = [
    ("onnxruntime", {"memory": {"limit_bytes": 1 << 20}}, "memory.limit_bytes"),
]
try:
    import openvino  # noqa: F401

    _UNHONOURED.append(("openvino", {"deterministic": True}, "deterministic"))
except ImportError:
    pass


def _open(engine: str, fallback: str, **settings: Any) -> InferenceSession:
    return InferenceSession(
        Path(DEMO_MODEL), device="cpu", engine=engine, fallback=fallback, **settings
    )


@pytest.mark.parametrize(("engine", "settings", "name"), _UNHONOURED)
def test_an_explicit_setting_the_engine_cannot_honour_raises_under_error(
    engine: str, settings: dict[str, Any], name: str
) -> None:
    with pytest.raises(FallbackError, match=f"setting {name}"):
        _open(engine, "error", **settings)


@pytest.mark.parametrize(("engine", "settings", "name"), _UNHONOURED)
def test_warn_warns_and_allow_records_the_setting_fallback(
    engine: str, settings: dict[str, Any], name: str
) -> None:
    with pytest.warns(UserWarning, match=f"setting {name}"):
        warned = _open(engine, "warn", **settings).record()
    allowed = _open(engine, "allow", **settings).record()
    for record in (warned, allowed):
        (row,) = [s for s in record.settings if s.name == name]
        assert not row.honoured
        assert [f.what for f in record.fallbacks].count(f"setting {name}") == 1


def test_defaults_the_engine_ignores_raise_nothing() -> None:
    # OpenVINO records memory.pool (default True) as not honoured: nobody asked for it.
    pytest.importorskip("openvino")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record = _open("openvino", "error").record()
    (pool,) = [s for s in record.settings if s.name == "memory.pool"]
    assert not pool.honoured
    assert not record.fallbacks


def _sources_rows(record: ExecutionRecord) -> dict[str, tuple[str, str]]:
    """setting -> (value, set by), from the rendered table."""
    text = render_text(record, width=200)
    rows = {}
    for line in text[text.index("Policy sources") :].splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 3 and cells[0].startswith("execution."):
            rows[cells[0]] = (cells[1], cells[2])
        elif rows and not line.strip().startswith("│"):
            break  # the table ended
    return rows


def test_policy_sources_show_one_row_per_setting_and_agree_with_precision() -> None:
    session = _open("onnxruntime", "allow", input_shapes={"image": [4, 1, 8, 8]})
    record = session.record()
    rows = _sources_rows(record)
    shapes = [p for p in rows if p.startswith("execution.input_shapes")]
    assert shapes == ["execution.input_shapes"]
    assert rows["execution.input_shapes"][1] == "argument"
    assert record.precision is not None
    assert record.precision.requested is None
    assert rows["execution.precision"][0].startswith("not set")
    explicit = _open("onnxruntime", "allow", precision="fp32").record()
    assert _sources_rows(explicit)["execution.precision"] == ("fp32", "argument")
