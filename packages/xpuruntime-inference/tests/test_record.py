"""The execution record: JSON against the documented schema, explain(), Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.record import ExecutionRecord, record_json_schema


def test_record_json_validates_against_schema(mlp: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    sess = InferenceSession(
        mlp, device="cpu", exec_policy=ExecutionPolicy(fallback="allow"), fp16=True
    )
    sess.run({"input": np.ones((2, 4), np.float32)})
    text = sess.record().to_json()
    jsonschema.validate(json.loads(text), record_json_schema())
    again = ExecutionRecord.from_json(text)
    assert again == sess.record().__class__.from_json(text)
    assert again.kind == "inference"
    assert again.runs[0].latency_ms > 0
    assert again.fallbacks[0].what == "precision"
    assert again.environment_hash
    assert again.policy_hash


def test_documented_schema_is_current() -> None:
    # docs/record-schema.md embeds record_json_schema(); regenerate it when this fails:
    # python -m xpuruntime.inference.schema_doc > docs/record-schema.md
    from xpuruntime.inference.schema_doc import render_schema_doc

    doc = Path(__file__).resolve().parents[3] / "docs" / "record-schema.md"
    assert doc.read_text() == render_schema_doc()


def test_explain_names_nodes_settings_and_runs(mlp: Path) -> None:
    sess = InferenceSession(
        mlp, device="cpu", exec_policy=ExecutionPolicy(graph_optimization="disabled")
    )
    sess.run({"input": np.ones((2, 4), np.float32)})
    text = sess.explain()
    for expected in (
        "Execution record",
        "engine",
        "onnxruntime",
        "graph_optimization",
        "ORT_DISABLE_ALL",
        "matmul",
        "MatMul",
        "CPUExecutionProvider",
        "Runs (1)",
    ):
        assert expected in text, expected


def test_profiling_merges_engine_and_core_events(mlp: Path, tmp_path: Path) -> None:
    from xpuruntime.runtime import profiler

    profiler.clear()  # the core profiler is the process's: earlier tests' runs are in it
    sess = InferenceSession(mlp, device="cpu", exec_policy=ExecutionPolicy(profiling=True))
    for _ in range(3):
        sess.run({"input": np.ones((2, 4), np.float32)})
    trace = sess.export_trace(tmp_path / "trace.json")
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    ours = [e for e in events if str(e.get("name", "")).startswith("InferenceSession.run")]
    engine = [e for e in events if e.get("pid") == "onnxruntime"]
    assert len(ours) == 3
    assert any(e.get("cat") == "Node" for e in engine)
    # Both sources are on one clock: the engine's node events fall inside our run ranges.
    nodes = [e for e in engine if e.get("cat") == "Node"]
    first, last = min(e["ts"] for e in ours), max(e["ts"] + e["dur"] for e in ours)
    assert all(first - 1000 <= e["ts"] <= last + 1000 for e in nodes)


def test_trace_needs_profiling(mlp: Path, tmp_path: Path) -> None:
    sess = InferenceSession(mlp, device="cpu")
    with pytest.raises(PolicyError, match="profiling=True"):
        sess.export_trace(tmp_path / "t.json")
