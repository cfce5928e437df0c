"""Models built with onnx.helper, reference outputs from ONNX Runtime's CPU EP, policy helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx builds the test models: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xpuruntime.policies import ExecutionPolicy  # noqa: E402
from xpuruntime.runtime.record import ExecutionRecord  # noqa: E402

RNG_SEED = 20261121


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # readable by every ONNX Runtime / OpenVINO this package supports
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _weight(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float
) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def build_mlp(path: Path, batch: int | str = 4) -> Path:
    """x[batch,16] -> MatMul+Add -> Relu -> MatMul+Add -> y[batch,8]."""
    rng = np.random.default_rng(RNG_SEED)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [
            _weight(rng, "w1", (16, 32), 0.25),
            _weight(rng, "b1", (32,), 0.1),
            _weight(rng, "w2", (32, 8), 0.25),
            _weight(rng, "b2", (8,), 0.1),
        ],
    )
    return _save(graph, path)


def build_cnn(path: Path) -> Path:
    """x[1,3,16,16] -> Conv3x3 -> Relu -> MaxPool2 -> Conv3x3 -> Relu -> GAP -> Flatten -> Gemm."""
    rng = np.random.default_rng(RNG_SEED + 1)
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["a1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a1"], ["a2"], name="relu1"),
        helper.make_node(
            "MaxPool", ["a2"], ["a3"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["a3", "c2w", "c2b"], ["a4"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a4"], ["a5"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["a5"], ["a6"], name="gap"),
        helper.make_node("Flatten", ["a6"], ["a7"], name="flatten"),
        helper.make_node("Gemm", ["a7", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [
            _weight(rng, "c1w", (8, 3, 3, 3), 0.3),
            _weight(rng, "c1b", (8,), 0.1),
            _weight(rng, "c2w", (16, 8, 3, 3), 0.2),
            _weight(rng, "c2b", (16,), 0.1),
            _weight(rng, "fw", (10, 16), 0.3),
            _weight(rng, "fb", (10,), 0.1),
        ],
    )
    return _save(graph, path)


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    return build_mlp(tmp_path / "mlp.onnx")


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    return build_cnn(tmp_path / "cnn.onnx")


@pytest.fixture
def dynamic_mlp(tmp_path: Path) -> Path:
    """The MLP with a symbolic batch dimension ``batch``."""
    return build_mlp(tmp_path / "mlp_dynamic.onnx", batch="batch")


def inputs_for(model: Path, batch: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 feeds for every model input (symbolic dims set to ``batch``)."""
    rng = np.random.default_rng(seed)
    graph = onnx.load(str(model)).graph
    feeds = {}
    for value in graph.input:
        dims = [
            d.dim_value if d.HasField("dim_value") else batch
            for d in value.type.tensor_type.shape.dim
        ]
        feeds[value.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def reference(model: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of ONNX Runtime's CPU execution provider (the ground truth of these tests)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def assert_close(
    got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], *, rel: float
) -> None:
    """Max abs error <= rel * max|want| (+1e-6): a tolerance relative to the output's scale."""
    assert set(got) == set(want)
    for name, expected in want.items():
        actual = np.asarray(got[name])
        assert actual.shape == expected.shape, name
        bound = rel * float(np.abs(expected).max()) + 1e-6
        err = float(np.abs(actual - expected).max())
        assert err <= bound, f"{name}: max abs error {err:.3g} > {bound:.3g}"


@pytest.fixture
def record() -> ExecutionRecord:
    return ExecutionRecord(kind="inference")


@pytest.fixture
def policy() -> Callable[..., ExecutionPolicy]:
    return ExecutionPolicy


# Test modules are imported with --import-mode=importlib (no sys.path entry for this folder),
# so the helpers above reach them as fixtures.
@pytest.fixture
def feeds_for() -> Callable[..., dict[str, np.ndarray]]:
    return inputs_for


@pytest.fixture
def ort_reference() -> Callable[..., dict[str, np.ndarray]]:
    return reference


@pytest.fixture
def close() -> Callable[..., None]:
    return assert_close


@pytest.fixture
def npu_absent() -> None:
    """Tests of the no-NPU behaviour (fallbacks) run only where no real NPU is found."""
    from xpuruntime.npu import discover_npus

    found = discover_npus()
    if found:
        pytest.skip(f"an NPU is present ({found[0].name}): the no-NPU fallback cannot happen here")
