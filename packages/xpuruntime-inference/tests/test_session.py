"""InferenceSession on real ONNX Runtime CPU sessions: seed calls, metadata, inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy, KernelPolicy
from xpuruntime.policies.errors import PolicyError, UnknownFieldError
from xpuruntime.runtime.device import cuda_available
from xpuruntime.runtime.errors import EngineNotInstalledError


def reference(model: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return raw.run(None, feeds)


def test_seed_onnxrt_call(mlp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # seed 003 §7.2: InferenceSession("model.onnx", engine="onnxrt")
    monkeypatch.chdir(mlp.parent)
    mlp.rename(mlp.parent / "model.onnx")
    sess = InferenceSession("model.onnx", engine="onnxrt")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = sess.run({"input": x})
    assert list(out) == ["output"]
    np.testing.assert_allclose(out["output"], reference(Path("model.onnx"), {"input": x})[0])
    record = sess.record()
    assert record.engine is not None
    assert (record.engine.requested, record.engine.chosen) == ("onnxrt", "onnxruntime")
    assert sess.engine == "onnxruntime"
    # device="auto": the GPU when this ONNX Runtime can use one here, else the CPU.
    cuda_usable = "CUDAExecutionProvider" in ort.get_available_providers() and cuda_available()
    assert sess.device == ("cuda:0" if cuda_usable else "cpu")


def test_seed_tensorrt_call_without_tensorrt(mlp: Path) -> None:
    # seed 004 §7 with TensorRT absent: a typed error that carries the install command.
    policy = KernelPolicy(matmul="cublasLt", attention="flash_v2")
    with pytest.raises(EngineNotInstalledError, match=r"pip install 'xpuruntime\[tensorrt\]'"):
        InferenceSession(
            model=str(mlp), device="cuda:0", engine="tensorrt", kernel_policy=policy, fp16=True
        )


def test_backend_is_an_alias_of_engine(mlp: Path) -> None:
    sess = InferenceSession(mlp, device="cpu", backend="onnxruntime")
    assert sess.engine == "onnxruntime"
    with pytest.raises(PolicyError, match="backend is an alias of engine"):
        InferenceSession(mlp, engine="onnxruntime", backend="tensorrt")


def test_auto_engine_records_why(mlp: Path) -> None:
    sess = InferenceSession(mlp)
    choice = sess.record().engine
    assert choice is not None
    assert choice.requested == "auto"
    assert choice.chosen == "onnxruntime"
    # tensorrt comes first in the default order and is not installed: the reason says so.
    assert "tensorrt" in choice.reason
    assert "skipped" in choice.reason


def test_metadata_and_dynamic_batch(mlp: Path) -> None:
    sess = InferenceSession(mlp, device="cpu")
    (inp,) = sess.inputs
    assert (inp.name, inp.dtype, inp.shape) == ("input", "float32", ("batch", 4))
    assert sess.output_names == ["output"]
    assert sess.outputs[0].shape == ("batch", 3)
    for batch in (1, 7):
        x = np.random.default_rng(batch).random((batch, 4), dtype=np.float32)
        assert sess.run({"input": x})["output"].shape == (batch, 3)
    assert "input: float32[batch, 4]" in repr(sess)


def test_output_names_select_outputs(two_inputs: Path) -> None:
    sess = InferenceSession(two_inputs, device="cpu")
    a = np.ones((2, 4), np.float32)
    out = sess.run({"a": a, "b": a}, output_names=["double"])
    assert list(out) == ["double"]
    np.testing.assert_array_equal(out["double"], 4 * a)
    both = sess.run({"a": a, "b": a})
    assert list(both) == ["sum", "double"]


class DLPackOnly:
    """A producer that speaks only the DLPack protocol (no numpy, no torch)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def __dlpack__(self, **kwargs: object) -> object:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


def test_dlpack_inputs(mlp: Path) -> None:
    sess = InferenceSession(mlp, device="cpu")
    x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    expected = reference(mlp, {"input": x})[0]
    np.testing.assert_allclose(sess.run({"input": DLPackOnly(x)})["output"], expected, rtol=1e-6)
    value = ort.OrtValue.ortvalue_from_numpy(x)  # ONNX Runtime's own tensor type
    np.testing.assert_allclose(sess.run({"input": value})["output"], expected, rtol=1e-6)
    with pytest.raises(TypeError, match="expects dtype float32, got float64"):
        sess.run({"input": DLPackOnly(x.astype(np.float64))})
    assert all(r.copies == [] for r in sess.record().runs)  # host tensors: viewed, not copied


def test_torch_inputs(mlp: Path) -> None:
    torch = pytest.importorskip("torch")
    sess = InferenceSession(mlp, device="cpu")
    x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    expected = reference(mlp, {"input": x})[0]
    t = torch.from_numpy(x.copy()).requires_grad_(True)  # a grad tensor is read, not rejected
    np.testing.assert_allclose(sess.run({"input": t})["output"], expected, rtol=1e-6)
    with pytest.raises(TypeError, match="expects dtype float32, got float64"):
        sess.run({"input": t.double()})
    assert sess.record().runs[0].copies == []


def test_keyword_arguments_override_the_policy_and_say_so(mlp: Path) -> None:
    # Explicit arguments are the top layer: they win over the policy object, per setting.
    sess = InferenceSession(
        mlp,
        device="cpu",
        exec_policy=ExecutionPolicy(device="cuda", fallback="error", num_threads=1),
        policy_arguments={"execution": {"fallback": "allow"}},
    )
    assert (sess.policy.device, sess.policy.fallback) == ("cpu", "allow")
    sources = sess.record().policy_sources
    assert sources["execution.device"] == sources["execution.fallback"] == "argument"
    assert sources["execution.num_threads"] == "policy"


def test_engine_options_are_applied_and_recorded(mlp: Path) -> None:
    options = {"onnxruntime": {"session.intra_op.allow_spinning": "0"}}
    sess = InferenceSession(mlp, device="cpu", engine_options=options)
    names = {s.name: s for s in sess.record().settings}
    setting = names["engine_options.onnxruntime.session.intra_op.allow_spinning"]
    assert setting.honoured
    assert sess.policy.engine_options["onnxruntime"] == {"session.intra_op.allow_spinning": "0"}
    with pytest.raises(PolicyError, match="unknown onnxruntime engine option 'bogus'"):
        InferenceSession(mlp, device="cpu", engine_options={"onnxruntime": {"bogus": 1}})


def test_keywords_are_policy_settings(mlp: Path) -> None:
    """Keywords other than the named parameters are ExecutionPolicy settings, recorded as
    arguments; anything else is refused with the valid names (nothing is swallowed)."""
    sess = InferenceSession(mlp, device="cpu", fallback="warn", num_threads=1)
    assert (sess.policy.fallback, sess.policy.num_threads) == ("warn", 1)
    assert sess.record().policy_sources["execution.fallback"] == "argument"
    with pytest.raises(UnknownFieldError, match=r"'falback'.*Did you mean 'fallback'"):
        InferenceSession(mlp, device="cpu", falback="warn")
    with pytest.raises(PolicyError, match="disagree"):
        InferenceSession(mlp, device="cpu", fp16=True, precision="int8")


def test_input_shapes_fix_symbolic_dimensions(mlp: Path) -> None:
    policy = ExecutionPolicy(static_shape=True, input_shapes={"input": [2, 4]})
    sess = InferenceSession(mlp, device="cpu", exec_policy=policy)
    settings = {s.name: s for s in sess.record().settings}
    assert settings["input_shapes"].applied == {"batch": 2}
    assert settings["static_shape"].honoured
    assert sess.run({"input": np.ones((2, 4), np.float32)})["output"].shape == (2, 3)
    with pytest.raises(PolicyError, match="model fixes it to 4"):
        InferenceSession(
            mlp, device="cpu", exec_policy=ExecutionPolicy(input_shapes={"input": [2, 5]})
        )


def test_run_history_is_bounded(mlp: Path) -> None:
    from xpuruntime.inference import session as session_module

    sess = InferenceSession(mlp, device="cpu")
    x = np.ones((1, 4), np.float32)
    for _ in range(session_module.RUN_HISTORY + 5):
        sess.run({"input": x})
    record = sess.record()
    assert len(record.runs) == session_module.RUN_HISTORY
    assert record.runs[-1].index == session_module.RUN_HISTORY + 4
    assert any("of 1005 runs" in n for n in record.notes)


def test_engines_are_published_to_the_core_registry(mlp: Path) -> None:
    from xpuruntime.runtime.dispatch import engine_registry

    InferenceSession(mlp, device="cpu", engine="onnxruntime")
    entry = engine_registry.get("onnxruntime")
    assert entry["capabilities"]["devices"][0] == "cpu"
    assert entry["capabilities"]["available"] == ["yes"]
