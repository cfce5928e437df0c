"""Placement classification: ONNX Runtime's CPU-preferred rule replayed on real ONNX graphs.

The placements given to :class:`ShapeAnalysis` here are the ones ONNX Runtime's CUDA EP makes
for these graphs (``GetCpuPreferredNodes``: Shape runs on CUDA with a CPU output; its int64
consumers go to the CPU; Reshape takes its shape input on the CPU and stays on CUDA). Real
engine placements are checked in the QNN tests (xpuruntime-npu) and on the GPU machine
(test_public_models.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from xpuruntime.inference.errors import HostShapeComputeError
from xpuruntime.inference.placement import (
    PlacedNode,
    ShapeAnalysis,
    classify,
    record_placement,
)
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.runtime.decisions import Decisions
from xpuruntime.runtime.errors import FallbackError
from xpuruntime.runtime.record import ExecutionRecord

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


def _const(name: str, value: np.ndarray) -> object:
    return numpy_helper.from_array(value, name)


def shape_graph(data_type: int = TensorProto.FLOAT) -> object:
    """x -> Relu -> Reshape(r, Concat(Unsqueeze(Gather(Shape(r), 0)), [-1]))."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["bu"], name="unsqueeze"),
        helper.make_node("Concat", ["bu", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
        helper.make_node("Cast", ["target"], ["target_f"], name="cast", to=data_type),
        helper.make_node("Mul", ["target_f", "big"], ["scaled"], name="scale"),
        helper.make_node("Add", ["target_f", "target_f"], ["doubled"], name="double"),
    ]
    inits = [
        _const("zero", np.array(0, np.int64)),
        _const("axes", np.array([0], np.int64)),
        _const("minus_one", np.array([-1], np.int64)),
        _const(
            "big", np.ones(2 * 1000, np.float32 if data_type == TensorProto.FLOAT else np.float16)
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "shape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y",)],
        inits,
    )
    graph.value_info.extend([helper.make_tensor_value_info("target_f", data_type, [2])])
    return graph


def _placed(graph: object, on_cpu: set[str]) -> list[PlacedNode]:
    return [
        PlacedNode(n.name, n.op_type, CPU if n.name in on_cpu else CUDA)  # type: ignore[attr-defined]
        for n in graph.node  # type: ignore[attr-defined]
    ]


def _classes(graph: object, nodes: list[PlacedNode]) -> dict[str, tuple[str, str]]:
    analysis = ShapeAnalysis(graph, {n.name: n.device for n in nodes}, CUDA)
    classified = classify(nodes, requested=CUDA, analysis=analysis, elsewhere_reason="declined")
    return {c.node.name: (c.placement, c.reason) for c in classified}


def test_shape_subgraph_on_the_host_is_shape_computation() -> None:
    graph = shape_graph()
    classes = _classes(graph, _placed(graph, {"gather", "unsqueeze", "concat", "cast", "double"}))
    for name in ("gather", "unsqueeze", "concat", "cast", "double"):
        assert classes[name][0] == "host_shape", classes[name]
    assert "'s'" in classes["gather"][1]
    for name in ("relu", "shape", "reshape", "scale"):
        assert classes[name][0] == "requested"


def test_data_inputs_make_a_fallback() -> None:
    graph = shape_graph()
    classes = _classes(
        graph, _placed(graph, {"gather", "unsqueeze", "concat", "cast", "relu", "scale"})
    )
    # A graph input alone does not make a node CPU-preferred: only consumers of host outputs
    # (Shape, Size, host shape nodes) are candidates.
    assert classes["relu"] == ("fallback", "declined: none of its inputs is a shape value")
    # 'scale' reads an initializer of 2000 elements: not ONNX Runtime's small-initializer case.
    assert classes["scale"][0] == "fallback"
    assert "initializer of 2000 elements" in classes["scale"][1]


def test_sixteen_bit_floats_are_never_host_shape_work() -> None:
    graph = shape_graph(TensorProto.FLOAT16)
    classes = _classes(graph, _placed(graph, {"gather", "unsqueeze", "concat", "cast", "double"}))
    assert classes["concat"][0] == "host_shape"
    assert classes["double"][0] == "fallback"
    assert "float16" in classes["double"][1]


def test_what_follows_a_fallback_is_a_fallback() -> None:
    graph = shape_graph()
    # 'relu' on the CPU (no kernel): its output is a host tensor, but data; 'shape' reads it.
    classes = _classes(graph, _placed(graph, {"relu", "shape", "gather", "unsqueeze", "concat"}))
    assert classes["relu"][0] == "fallback"
    assert classes["shape"][0] == "host_shape"  # reads only metadata, wherever its input is
    assert classes["gather"][0] == "host_shape"


def test_fallback_output_taints_its_consumers() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
            helper.make_node("Shape", ["nz"], ["ns"], name="nz_shape"),
            helper.make_node("Concat", ["s", "nz_flat"], ["c"], name="concat", axis=0),
            helper.make_node("Reshape", ["nz", "minus_one"], ["nz_flat"], name="flatten"),
        ],
        "taint",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("c", TensorProto.INT64, None)],
        [_const("minus_one", np.array([-1], np.int64))],
    )
    nodes = _placed(graph, {"nonzero", "flatten", "concat"})
    classes = _classes(graph, nodes)
    assert classes["nonzero"][0] == "fallback"
    assert classes["flatten"][0] == "fallback"
    assert "fallback node 'nonzero'" in classes["flatten"][1]
    assert classes["concat"][0] == "fallback"


def test_subgraphs_are_analysed_on_their_own() -> None:
    # Inside an If body a value of the enclosing graph is not a host tensor of the body
    # (ONNX Runtime partitions each graph separately), even if it was one outside.
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["s", "zero"], ["g"], name="body_gather", axis=0),
            helper.make_node("Shape", ["x"], ["bs"], name="body_shape"),
            helper.make_node("Gather", ["bs", "zero"], ["bg"], name="body_shape_gather", axis=0),
            helper.make_node("Add", ["g", "bg"], ["out"], name="body_add"),
        ],
        "body",
        [],
        [helper.make_tensor_value_info("out", TensorProto.INT64, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("If", ["cond"], ["y"], name="if", then_branch=body, else_branch=body),
        ],
        "outer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [_const("zero", np.array(0, np.int64))],
    )
    placed = {"shape": CUDA, "if": CUDA, "body_gather": CPU, "body_shape": CUDA}
    placed |= {"body_shape_gather": CPU, "body_add": CPU}
    nodes = [PlacedNode(n, "op", d) for n, d in placed.items()]
    classes = _classes(graph, nodes)
    assert classes["body_gather"][0] == "fallback"
    assert "enclosing graph" in classes["body_gather"][1]
    assert classes["body_shape_gather"][0] == "host_shape"
    assert classes["body_add"][0] == "fallback"


def test_names_the_optimizer_derived_map_back() -> None:
    graph = shape_graph()
    placed = {n.name: CUDA for n in graph.node}  # type: ignore[attr-defined]
    placed["gather"] = CPU
    analysis = ShapeAnalysis(graph, placed, CUDA)
    assert analysis.verdict("_if_then_branch_token_8_gather_token_3")[0] is True  # type: ignore[index]
    assert analysis.verdict("gather/MatMulAddFusion")[0] is True  # type: ignore[index]
    assert analysis.verdict("made_up_node") is None
    (made_up,) = classify(
        [PlacedNode("made_up_node", "Gather", CPU)],
        requested=CUDA,
        analysis=analysis,
        elsewhere_reason="declined",
    )
    assert made_up.placement == "fallback"
    assert "does not show it" in made_up.reason


def _record(classes: list[tuple[str, str]], **policy: str) -> ExecutionRecord:
    graph = shape_graph()
    on_cpu = {name for name, _ in classes}
    nodes = _placed(graph, on_cpu)
    analysis = ShapeAnalysis(graph, {n.name: n.device for n in nodes}, CUDA)
    record = ExecutionRecord(kind="inference")
    settings = {"fallback": "error", "host_shape_compute": "allow", **policy}
    record_placement(
        Decisions(ExecutionPolicy(**settings), record=record),  # type: ignore[arg-type]
        classify(nodes, requested=CUDA, analysis=analysis, elsewhere_reason="declined"),
        requested=CUDA,
        precision="fp32",
    )
    return record


def test_error_mode_accepts_host_shape_nodes_and_records_them() -> None:
    record = _record([("gather", ""), ("unsqueeze", ""), ("concat", "")])
    assert record.fallbacks == []
    placements = {n.name: n.placement for n in record.nodes}
    assert placements["gather"] == placements["concat"] == "host_shape"
    assert placements["reshape"] == "requested"
    assert any("host-side shape computation" in n for n in record.notes)


def test_forbidding_host_shape_work_names_the_nodes() -> None:
    with pytest.raises(HostShapeComputeError, match=r"'gather' \(Gather\).*host_shape_compute"):
        _record([("gather", ""), ("concat", "")], host_shape_compute="forbid")


def test_fallbacks_follow_the_fallback_mode_only() -> None:
    with pytest.raises(FallbackError, match="'relu'") as info:
        _record([("relu", ""), ("gather", "")])
    assert "gather" not in str(info.value)
    record = _record([("relu", ""), ("gather", "")], fallback="allow")
    (fallback,) = record.fallbacks
    assert fallback.what.startswith("1 node(s) 'relu'")


def _function_model() -> object:
    """x -> Flat (a model-local function: Reshape(x, Concat(Gather(Shape(x), 0), [-1])) then
    Relu): an op ONNX Runtime runs only by inlining its function body."""
    body = [
        helper.make_node("Shape", ["X"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["zero"], value=_const("z", np.array([0], np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Constant", [], ["m1"], value=_const("m", np.array([-1], np.int64))),
        helper.make_node("Concat", ["n", "m1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["X", "target"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["Y"], name="relu"),
    ]
    flat = helper.make_function("local", "Flat", ["X"], ["Y"], body, [helper.make_opsetid("", 18)])
    graph = helper.make_graph(
        [helper.make_node("Flat", ["x"], ["y"], name="flat", domain="local")],
        "inlined",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[flat])
    model.ir_version = 10
    return model


@pytest.fixture(scope="module")
def inlined(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object, list[str]]:
    """The model graph, ONNX Runtime's own optimized graph of it (the function body inlined,
    its nodes renamed) and the names ONNX Runtime's placement reports."""
    import onnx
    import onnxruntime as ort

    from xpuruntime.inference.kit.provider_assignment import RECORD_ASSIGNMENT, assigned_nodes

    model = _function_model()
    path = tmp_path_factory.mktemp("inlined") / "optimized.onnx"
    options = ort.SessionOptions()
    options.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    options.optimized_model_filepath = str(path)
    session = ort.InferenceSession(
        model.SerializeToString(),  # type: ignore[attr-defined]
        options,
        providers=[CPU],
    )
    names = [n.name for n in assigned_nodes(session) or []]
    return model.graph, onnx.load(str(path)).graph, names  # type: ignore[attr-defined]


def _assign(
    inlined: tuple[object, object, list[str]], on_cpu: set[str], **partitioned: object
) -> ExecutionRecord:
    """Record a CUDA placement of the inlined nodes: ``on_cpu`` (inlined names ending so) on
    the CPU, the rest on CUDA, the way the CUDA EP partitions a shape subgraph."""
    from xpuruntime.inference.kit.provider_assignment import record_assignment

    graph, optimized, names = inlined
    nodes = [
        PlacedNode(n, n.rsplit("_", 1)[-1], CPU if n.rsplit("_", 1)[-1] in on_cpu else CUDA)
        for n in names
    ]
    record = ExecutionRecord(kind="inference")
    record_assignment(
        Decisions(ExecutionPolicy(fallback="allow"), record=record),
        nodes,
        requested=CUDA,
        graph=graph,
        precision="fp32",
        partitioned=partitioned.get("partitioned", lambda: optimized),  # type: ignore[arg-type]
    )
    return record


def test_inlined_function_nodes_are_judged_on_the_partitioned_graph(
    inlined: tuple[object, object, list[str]],
) -> None:
    _, _, names = inlined
    # ONNX Runtime really inlined the body: its nodes, renamed, replace the function op.
    assert "flat" not in names
    assert {"_inlfunc_Flat_gather", "_inlfunc_Flat_concat"} <= set(names)
    record = _assign(inlined, {"gather", "concat", "relu"})
    nodes = {n.name: n for n in record.nodes}
    for name in ("_inlfunc_Flat_gather", "_inlfunc_Flat_concat"):
        assert nodes[name].placement == "host_shape"
        assert "inlined from Flat's ONNX function body" in nodes[name].reason
    # The same graph shows the Relu computing on tensor data: still a fallback, saying so.
    relu = nodes["_inlfunc_Flat_relu"]
    assert relu.placement == "fallback"
    assert "inlined from Flat's ONNX function body" in relu.reason
    assert "tensor data" in relu.reason
    (fallback,) = record.fallbacks
    assert "_inlfunc_Flat_relu" in fallback.what
    assert "gather" not in fallback.what


def test_without_the_partitioned_graph_inlined_nodes_stay_fallbacks(
    inlined: tuple[object, object, list[str]],
) -> None:
    def unreadable() -> object:
        raise OSError("disk full")

    record = _assign(inlined, {"gather"}, partitioned=unreadable)
    (gather,) = [n for n in record.nodes if n.name == "_inlfunc_Flat_gather"]
    assert gather.placement == "fallback"
    assert "does not show it" in gather.reason
    assert "disk full" in gather.reason


def test_the_partitioned_graph_is_read_only_for_unshown_nodes() -> None:
    from xpuruntime.inference.kit.provider_assignment import record_assignment

    graph = shape_graph()
    record = ExecutionRecord(kind="inference")

    def never() -> object:
        raise AssertionError("read although the model graph shows every node")

    record_assignment(
        Decisions(ExecutionPolicy(fallback="error"), record=record),
        _placed(graph, {"gather", "unsqueeze", "concat"}),
        requested=CUDA,
        graph=graph,
        precision="fp32",
        partitioned=never,
    )
    assert {n.placement for n in record.nodes} == {"requested", "host_shape"}
