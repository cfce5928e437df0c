"""compare: tolerances, and naming the first node where two runs diverge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from xpuruntime.inference.compare import (
    _first_divergence,
    compare_models,
    compare_tensors,
    expose_intermediates,
    parse_targets,
)
from xpuruntime.inference.demo import DEMO_MODEL, demo_images
from xpuruntime.policies.errors import PolicyError


def test_tolerance_rule() -> None:
    b = np.array([1.0, 100.0], dtype=np.float32)
    ok = compare_tensors("y", "t", b + np.array([1e-5, 1e-2], np.float32), b, atol=1e-4, rtol=1e-3)
    assert ok.passed
    assert ok.max_abs == pytest.approx(1e-2, rel=1e-3)
    bad = compare_tensors("y", "t", b + 1.0, b, atol=1e-4, rtol=1e-3)
    assert not bad.passed
    assert bad.max_rel == pytest.approx(1.0, rel=1e-6)
    shape = compare_tensors("y", "t", np.ones(3), np.ones(2), atol=0, rtol=0)
    assert not shape.passed
    assert "shape" in shape.note


def test_parse_targets() -> None:
    targets = parse_targets("onnxruntime:cpu, openvino")
    assert [str(t) for t in targets] == ["onnxruntime:cpu", "openvino:cpu"]
    with pytest.raises(PolicyError, match="at least two"):
        parse_targets("onnxruntime:cpu")


def _perturbed_copy(tmp_path: Path) -> Path:
    """The demo model with fc1's weights changed: its outputs diverge from fc1 on."""
    model = onnx.load(str(DEMO_MODEL))
    for init in model.graph.initializer:
        if init.name == "fc1.weight":
            w = onnx.numpy_helper.to_array(init) * 1.5
            init.CopyFrom(onnx.numpy_helper.from_array(w.astype(np.float32), init.name))
    path = tmp_path / "perturbed.onnx"
    onnx.save(model, str(path))
    return path


def _run_all(path: Path, feeds: dict[str, Any]) -> dict[str, Any]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def test_per_layer_names_the_first_diverging_node(tmp_path: Path) -> None:
    exposed, order = expose_intermediates(DEMO_MODEL, tmp_path / "a.onnx")
    exposed_b, _ = expose_intermediates(_perturbed_copy(tmp_path), tmp_path / "b.onnx")
    assert [node for node, _, _ in order][:3] == ["conv", "conv_relu", "pool"]
    feeds = {"image": demo_images(2)}
    reference, other = _run_all(exposed, feeds), _run_all(exposed_b, feeds)
    assert set(reference) >= {"conv", "pool", "flat", "fc1", "probabilities"}
    found = _first_divergence(order, "b", other, reference, 1e-5, 1e-4)
    assert found is not None
    assert (found.node, found.op_type, found.tensor) == ("fc1", "Gemm", "fc1")
    assert found.max_abs > 0


def test_compare_models_runs_every_target() -> None:
    feeds = {"image": demo_images(2)}
    report = compare_models(
        DEMO_MODEL, parse_targets("onnxruntime:cpu,onnxrt:cpu"), feeds, per_layer=True
    )
    assert report.passed
    assert [t.ran for t in report.targets] == [True, True]
    assert report.first_divergence is None
    assert [c.tensor for c in report.outputs] == ["probabilities"]


def test_per_layer_across_onnxruntime_and_openvino() -> None:
    pytest.importorskip("openvino")
    pytest.importorskip("xpuruntime.npu")
    feeds = {"image": demo_images(2)}
    targets = parse_targets("onnxruntime:cpu,openvino:cpu")
    close = compare_models(DEMO_MODEL, targets, feeds, atol=1e-4, rtol=1e-3, per_layer=True)
    assert close.passed
    assert close.first_divergence is None
    # With zero tolerance the two engines' rounding differs somewhere; where depends on the
    # CPU's kernels (on some the convolution agrees bit for bit and only softmax differs).
    exact = compare_models(DEMO_MODEL, targets, feeds, atol=0.0, rtol=0.0, per_layer=True)
    assert exact.first_divergence is not None
    assert exact.first_divergence.target == "openvino:cpu"
    nodes = [n.name for n in onnx.load(str(DEMO_MODEL)).graph.node]
    assert exact.first_divergence.node in nodes
