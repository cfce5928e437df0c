"""Real ONNX models built with onnx.helper, and the environment facts tests skip on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8  # loadable by every supported onnxruntime
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def mlp_model(path: Path, *, weight_scale: float = 1.0) -> Path:
    """input[batch, 4] -> MatMul -> Add -> Relu -> output[batch, 3]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(
        (rng.standard_normal((4, 3)) * weight_scale).astype(np.float32), "W"
    )
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["mm"], name="matmul"),
            helper.make_node("Add", ["mm", "B"], ["biased"], name="add_bias"),
            helper.make_node("Relu", ["biased"], ["output"], name="relu"),
        ],
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        [w, b],
    )
    return save(helper.make_model(graph, opset_imports=OPSET), path)


def two_input_model(path: Path) -> Path:
    """a[batch, 4] + b[batch, 4] -> sum; also emits a doubled copy (two outputs)."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
            helper.make_node("Add", ["sum", "sum"], ["double"], name="double"),
        ],
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 4]),
        ],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("double", TensorProto.FLOAT, ["batch", 4]),
        ],
    )
    return save(helper.make_model(graph, opset_imports=OPSET), path)


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    return mlp_model(tmp_path / "mlp.onnx")


@pytest.fixture
def two_inputs(tmp_path: Path) -> Path:
    return two_input_model(tmp_path / "two_inputs.onnx")


def cuda_ep_ready() -> bool:
    """onnxruntime with the CUDA execution provider and a CUDA device the core can see."""
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    import onnxruntime as ort

    import xpuruntime.runtime as rt

    return "CUDAExecutionProvider" in ort.get_available_providers() and rt.cuda_available()


@pytest.fixture
def without_cuda_ep() -> None:
    """Skip where ONNX Runtime can use CUDA: these tests need it to be absent."""
    if cuda_ep_ready():
        pytest.skip("this machine has a usable CUDA execution provider")


@pytest.fixture
def cuda_ep() -> None:
    """Skip unless ONNX Runtime's CUDA execution provider and a CUDA device are present."""
    if not cuda_ep_ready():
        pytest.skip("needs onnxruntime-gpu (CUDAExecutionProvider) and a CUDA device")


@pytest.fixture
def cuda_device() -> None:
    """Skip unless the core sees a CUDA device (a CUDA build of the core on a GPU machine)."""
    from xpuruntime.runtime.device import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA device and a CUDA build of xpuruntime-core")


@pytest.fixture
def make_mlp() -> object:
    """The MLP builder, for tests that need several variants of the model."""
    return mlp_model


@pytest.fixture
def build_model() -> object:
    """``build_model(path, nodes, inputs, outputs)``: a checked one-graph model saved at path."""

    def build(
        path: Path,
        nodes: list[onnx.NodeProto],
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
    ) -> Path:
        graph = helper.make_graph(nodes, path.stem, inputs, outputs)
        return save(helper.make_model(graph, opset_imports=OPSET), path)

    return build


def passthrough_model(
    path: Path, inputs: list[tuple[str, int, list[int | str | None] | None]]
) -> Path:
    """One output per input (``<name>_out = Identity(<name>)``), inputs declared as given:
    (name, onnx element type, dims or None for no shape). Dims: int, a name, or None."""
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"], name=f"id_{n}") for n, _, _ in inputs]
    graph = helper.make_graph(
        nodes,
        "passthrough",
        [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs],
        [helper.make_tensor_value_info(f"{n}_out", t, dims) for n, t, dims in inputs],
    )
    model = helper.make_model(graph, opset_imports=OPSET)
    model.ir_version = 8
    # Not onnx.checker: it requires declared shapes, and inputs without one are a case here
    # (ONNX Runtime loads them and accepts any rank).
    onnx.save(model, str(path))
    return path


@pytest.fixture
def make_passthrough() -> object:
    """The passthrough-model builder (declared input shapes and types of one's choosing)."""
    return passthrough_model
