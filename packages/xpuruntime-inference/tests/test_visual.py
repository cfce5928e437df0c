"""Execution records as pictures: node ids, Model Explorer overlays checked node by node
against real records, per-node times from the engines' profilers, layer differences and
timelines. The HTML report is in test_visual_report.py, the browser in
test_visual_browser.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.compare import Target
from xpuruntime.inference.visual.graph_ids import match_nodes, read_graph_ids
from xpuruntime.inference.visual.overlays import (
    PLACEMENT_COLOURS,
    placement_value,
    record_overlays,
    write_overlays,
)
from xpuruntime.runtime.record import ExecutionRecord, NodeRecord

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8  # loadable by every supported onnxruntime
    if model.graph.name:  # the checker wants a name; the adapter copes without one
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def shape_model(path: Path, *, graph_name: str = "shapes", duplicate: bool = False) -> Path:
    """x[n, 4] -> Relu -> Add (unnamed), and Shape -> Gather (unnamed) -> Cast (with
    ``duplicate``, named like the Shape node: ONNX Runtime refuses that, the adapter renames
    it), and an If whose branches hold an unnamed node."""
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["r"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", 4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["e"], name="negate")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", 4])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "r"], ["twice"]),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"]),
        helper.make_node(
            "Cast", ["n"], ["nf"], name="shape" if duplicate else "cast", to=TensorProto.FLOAT
        ),
        helper.make_node("Greater", ["nf", "one"], ["big"], name="compare"),
        helper.make_node(
            "If",
            ["big"],
            ["chosen"],
            name="branch",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        graph_name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("twice", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("chosen", TensorProto.FLOAT, ["n", 4]),
        ],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    return save(helper.make_model(graph, opset_imports=OPSET), path)


FEEDS = {"x": np.arange(12, dtype=np.float32).reshape(3, 4) - 5}


def test_node_ids_follow_the_adapters_naming(tmp_path: Path) -> None:
    graph = read_graph_ids(shape_model(tmp_path / "m.onnx", duplicate=True))
    assert graph.graph == "shapes"
    ids = [(n.id, n.op_type) for n in graph.nodes]
    assert ids == [
        ("node", "Relu"),
        ("node_1", "Add"),
        ("shape", "Shape"),
        ("node_2", "Gather"),
        ("shape_1", "Cast"),  # the duplicate name gets the adapter's suffix
        ("compare", "Greater"),
        ("branch", "If"),
        # Branches in the file's attribute order, each with its own set of used names.
        ("branch/else_branch/negate", "Neg"),
        ("branch/then_branch/node", "Identity"),
    ]
    assert [n.index for n in graph.nodes] == [0, 1, 2, 3, 4, 5, 6, None, None]


def test_an_unnamed_graph_keeps_its_empty_name(tmp_path: Path) -> None:
    assert read_graph_ids(shape_model(tmp_path / "m.onnx", graph_name="")).graph == ""


def _adapter_ids(path: Path) -> tuple[str, dict[str, str]]:
    main = pytest.importorskip(
        "model_explorer_onnx.main", reason="needs the explore extra (model-explorer-onnx)"
    )
    graphs = main.ONNXAdapter().convert(str(path), {})["graphs"]
    # The adapter adds "[value] ..." nodes for graph I/O and initializers, and "..._phi"
    # nodes merging If branches: not ONNX nodes.
    return graphs[0].id, {n.id: n.label for n in graphs[0].nodes if n.label != "(Phi)"}


def _models(tmp_path: Path) -> list[Path]:
    models = [
        shape_model(tmp_path / "m.onnx", duplicate=True),
        shape_model(tmp_path / "u.onnx", graph_name=""),
    ]
    folder = os.environ.get("XPURUNTIME_PUBLIC_MODELS")
    if folder and Path(folder).is_dir():
        models += sorted(Path(folder).glob("*.onnx"))
    return models


@pytest.mark.filterwarnings("ignore")  # the adapter warns about unnamed graphs and shapes
def test_node_ids_equal_the_adapters_own(tmp_path: Path) -> None:
    for path in _models(tmp_path):
        graph_id, adapter = _adapter_ids(path)
        ours = read_graph_ids(path)
        assert ours.graph == graph_id, path
        onnx_nodes = {k: v for k, v in adapter.items() if not k.startswith("[value] ")}
        assert {n.id: n.op_type for n in ours.nodes} == onnx_nodes, path


def _session_record(path: Path, **settings: object) -> ExecutionRecord:
    with InferenceSession(path, engine="onnxruntime", device="cpu", **settings) as sess:
        sess.run(FEEDS)
        return sess.record()


def _overlay(folder: Path, name: str) -> dict[str, dict[str, object]]:
    data = json.loads((folder / f"{name}.json").read_text())
    (graph,) = data.values()
    results: dict[str, dict[str, object]] = graph["results"]
    return results


def test_placement_and_precision_overlays_node_by_node(tmp_path: Path) -> None:
    path = shape_model(tmp_path / "m.onnx")
    record = _session_record(path, graph_optimization="disabled")
    graph = read_graph_ids(path)
    write_overlays(tmp_path / "nd", graph, record_overlays(record, graph))
    placement = _overlay(tmp_path / "nd", "placement")
    precision = _overlay(tmp_path / "nd", "precision")
    matching = match_nodes(record.nodes, graph)
    # ONNX Runtime reports every node of the main graph here; each is on the overlay once.
    assert not matching.unmatched
    assert len(placement) == len(precision) == len(record.nodes)
    for index, node in enumerate(record.nodes):
        node_id = matching.ids[index]
        assert next(n for n in graph.nodes if n.id == node_id).op_type == node.op_type
        assert placement[node_id]["value"] == placement_value(node)
        assert placement[node_id]["bgColor"] == PLACEMENT_COLOURS[str(node.placement)]
        assert precision[node_id]["value"] == node.precision
    index = json.loads((tmp_path / "nd" / "index.json").read_text())
    assert index["graph"] == "shapes"
    assert {f["file"] for f in index["files"]} == {"placement.json", "precision.json"}


def test_placement_overlay_shows_each_class_with_its_reason(tmp_path: Path) -> None:
    """A record whose nodes ran elsewhere (as a CUDA or QNN session's do): each class gets
    its colour and the record's reason; a node the graph lacks is listed, not drawn."""
    path = shape_model(tmp_path / "m.onnx")
    record = _session_record(path, graph_optimization="disabled")
    shape_reason = "shape computation: reads only its input's shape"
    fallback_reason = "no CUDA kernel for Relu"
    nodes = [
        msgspec.structs.replace(n, requested="cuda", chosen="cpu", placement=p, reason=r)
        if (p := {"Shape": "host_shape", "Relu": "fallback"}.get(n.op_type))
        and (r := shape_reason if p == "host_shape" else fallback_reason)
        else n
        for n in record.nodes
    ]
    nodes.append(NodeRecord("FusedMatMul_7", "FusedMatMul", "cuda", "cuda"))
    record = msgspec.structs.replace(record, nodes=nodes)
    graph = read_graph_ids(path)
    write_overlays(tmp_path / "nd", graph, record_overlays(record, graph))
    placement = _overlay(tmp_path / "nd", "placement")
    assert placement["shape"]["bgColor"] == PLACEMENT_COLOURS["host_shape"]
    assert placement["shape"]["value"] == (f"host_shape: on cpu (requested cuda): {shape_reason}")
    assert placement["node"]["bgColor"] == PLACEMENT_COLOURS["fallback"]
    assert fallback_reason in str(placement["node"]["value"])
    assert placement["node_1"]["bgColor"] == PLACEMENT_COLOURS["requested"]
    index = json.loads((tmp_path / "nd" / "index.json").read_text())
    assert index["files"][0]["unmatched"] == ["FusedMatMul_7 (FusedMatMul)"]
    assert "FusedMatMul_7" not in placement


def test_unnamed_nodes_match_only_when_the_counts_agree() -> None:
    from xpuruntime.inference.visual.graph_ids import GraphIds, GraphNode

    graph = GraphIds(
        "g", (GraphNode("node", "", "Relu", ("a",), 0), GraphNode("node_1", "", "Relu", ("b",), 1))
    )
    both = match_nodes([NodeRecord("", "Relu"), NodeRecord("", "Relu")], graph)
    assert both.ids == {0: "node", 1: "node_1"}
    assert both.by_order == {0, 1}
    one = match_nodes([NodeRecord("", "Relu")], graph)  # an engine removed one: ambiguous
    assert one.ids == {}
    assert len(one.unmatched) == 1


def test_onnxruntime_node_times_come_from_its_profiler(tmp_path: Path) -> None:
    from xpuruntime.inference.visual.node_times import onnxruntime_times

    path = shape_model(tmp_path / "m.onnx")
    graph = read_graph_ids(path)
    times = onnxruntime_times(path, graph, FEEDS, runs=3, policy=None)
    assert "enable_profiling" in times.source
    assert times.runs == 3
    main_ids = {n.id for n in graph.nodes if n.index is not None}
    # Every timed node is a node of the graph or listed as the engine's own.
    assert set(times.mean_us) <= {n.id for n in graph.nodes}
    assert {"node", "node_1", "shape", "node_2"} <= set(times.mean_us) <= main_ids
    assert all(v >= 0 for v in times.mean_us.values())
    # Four runs (one untimed) of each timed node's kernel.
    kernel_events = [e for e in times.events if e["name"] == "shape_kernel_time"]
    assert len(kernel_events) == 4


def test_openvino_node_times_come_from_its_counters(tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="needs openvino: pip install 'xpuruntime[openvino]'")
    from xpuruntime.inference.visual.node_times import openvino_times

    path = shape_model(tmp_path / "m.onnx")
    graph = read_graph_ids(path)
    times = openvino_times(path, graph, FEEDS, runs=2)
    assert "PERF_COUNT" in times.source
    assert set(times.mean_us) <= {n.id for n in graph.nodes}
    assert times.mean_us, times.unmatched_us  # OpenVINO keeps at least Relu and Add
    assert all(e["dur"] >= 0 and e["pid"] == "openvino" for e in times.events)


def test_layer_differences_cover_every_node_output(tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="needs openvino: pip install 'xpuruntime[openvino]'")
    from xpuruntime.inference.visual.layer_diff import layer_differences

    path = shape_model(tmp_path / "m.onnx")
    graph = read_graph_ids(path)
    diff = layer_differences(
        path, graph, Target("onnxruntime", "cpu"), Target("openvino", "cpu"), FEEDS
    )
    tensors = [o.tensor for o in diff.outputs]
    assert tensors == ["r", "twice", "s", "n", "nf", "big", "chosen"]
    assert all(o.passed for o in diff.outputs)
    assert diff.first_divergence is None
    assert set(diff.max_abs_by_node()) == {
        "node", "node_1", "shape", "node_2", "cast", "compare", "branch"
    }  # fmt: skip


def test_a_runs_timeline_holds_every_node(tmp_path: Path) -> None:
    from xpuruntime.inference.visual.timeline import run_timeline

    path = shape_model(tmp_path / "m.onnx")
    trace = run_timeline(path, FEEDS, tmp_path / "trace.json", runs=2)
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if str(e.get("name", "")).endswith("_kernel_time")]
    # Two runs of every node ONNX Runtime kept (it may fold some), on one clock with the
    # core profiler's range around each run (the core's buffer is per process: earlier
    # sessions' ranges are in it too).
    assert len(kernels) >= 2 * 4
    runs = [e for e in events if str(e.get("name", "")).startswith("InferenceSession.run")]
    last = max(runs, key=lambda e: e["ts"])
    inside = [k for k in kernels if last["ts"] <= k["ts"] <= last["ts"] + last["dur"]]
    assert len(inside) == len(kernels) // 2


def test_a_training_steps_kernels_with_the_ops_that_launched_them(tmp_path: Path) -> None:
    """A trace in the layout PyTorch's profiler writes (cpu_op > cuda_runtime launch ->
    kernel, joined by correlation id)."""
    from xpuruntime.inference.visual.timeline import kernel_timeline

    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 100, "dur": 50, "tid": 7, "pid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5,
         "tid": 7, "pid": 1, "args": {"correlation": 42}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 130, "dur": 20, "tid": 7,
         "pid": 0, "args": {"correlation": 42, "stream": 7}},
        {"ph": "X", "cat": "python_function", "name": "forward", "ts": 90, "dur": 80, "tid": 7},
        {"ph": "X", "cat": "xrt", "name": "dispatch", "ts": 95, "dur": 1, "tid": 7, "pid": 1},
    ]  # fmt: skip
    source = tmp_path / "step.json"
    source.write_text(json.dumps({"traceEvents": events}))
    written, kernels = kernel_timeline(source, tmp_path / "kernels.json")
    kept = json.loads(written.read_text())["traceEvents"]
    assert kernels == 1
    assert [e["name"] for e in kept] == ["process_name", "sm90_gemm", "dispatch"]
    assert kept[1]["args"]["launched by"] == "aten::mm"


def test_a_file_that_is_no_trace_is_a_clear_error(tmp_path: Path) -> None:
    from xpuruntime.inference.errors import InvalidModelError
    from xpuruntime.inference.visual.timeline import kernel_timeline

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InvalidModelError, match="export_chrome_trace"):
        kernel_timeline(bad, tmp_path / "out.json")


def test_explore_writes_node_data_only_where_asked(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from xpuruntime.inference.cli import main

    path = shape_model(tmp_path / "m.onnx")
    out = tmp_path / "nd"
    result = CliRunner().invoke(
        main,
        ["explore", str(path), "--device", "cpu", "--engine", "onnxruntime",
         "--input-shapes", "x:3x4", "--runs", "2", "--node-data-out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "index.json", "node_time.json", "placement.json", "precision.json"
    ]  # fmt: skip
    record = onnx.load(str(path))
    assert {n.op_type for n in record.graph.node} >= {"Shape", "Gather"}
    times = json.loads((out / "node_time.json").read_text())["shapes"]
    assert times["gradient"]
    assert set(times["results"]) <= {n.id for n in read_graph_ids(path).nodes}


def test_a_real_training_step_trace_reads(tmp_path: Path) -> None:
    """A CPU training step profiled by xpuruntime.pytorch.profile: PyTorch's own trace
    format; no device kernels without a GPU, and the command says so."""
    torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'xpuruntime[torch]'")
    xpt = pytest.importorskip("xpuruntime.pytorch")
    from click.testing import CliRunner

    from xpuruntime.inference.cli import main

    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trace = tmp_path / "step.json"
    with xpt.profile(export_chrome_trace=trace):
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()
    events = json.loads(trace.read_text())["traceEvents"]
    device_kernels = sum(e.get("cat") == "kernel" for e in events)
    out = tmp_path / "kernels.json"
    result = CliRunner().invoke(main, ["kernel-timeline", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["otherData"]["kernels"] == device_kernels
    if not device_kernels:
        assert "holds no device kernels" in result.output


def test_the_cli_imports_no_plotting_or_model_explorer() -> None:
    import subprocess
    import sys

    code = (
        "import sys, xpuruntime.inference.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'bokeh', 'model_explorer', 'model_explorer_onnx'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _outward_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), or None."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


def test_explore_serves_model_explorer_on_loopback_only(tmp_path: Path) -> None:
    """``explore`` without --node-data-out: Model Explorer answers on 127.0.0.1, with the
    overlays in its page's configuration, and on no other address."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    pytest.importorskip("model_explorer", reason="needs the explore extra")
    path = shape_model(tmp_path / "m.onnx")
    port = _free_port()
    command = [
        sys.executable, "-c", "from xpuruntime.inference.cli import main; main()",
        "explore", str(path),
        "--engine", "onnxruntime", "--device", "cpu", "--input-shapes", "x:3x4",
        "--no-times", "--port", str(port), "--no-browser",
    ]  # fmt: skip
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # Model Explorer loads all its adapters first
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert page.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "Model Explorer did not start in 300 s"
                time.sleep(1)
        address = _outward_address()
        if address is not None:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((address, port), timeout=5).close()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # the server and any child it started
        output = server.communicate(timeout=30)[0]
    assert "placement.json" in output
    assert f"http://127.0.0.1:{port}/?data=" in output
