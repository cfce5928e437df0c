"""The engine behaviour contract, one suite over every engine installed here.

Each test runs on real sessions of each engine present (ONNX Runtime; OpenVINO; QNN in its
own environment; TensorRT where installed), through ``InferenceSession`` as a user calls it:
the model's own input/output names (on a model raw OpenVINO renames), the same feed
conversions and refusals, ``output_names`` semantics, typed errors for damaged models, feeds
and settings, closed sessions, a failed run leaving the session usable, records readable
while runs are in flight, and precision recorded by the one rule. Then the fault
battery: damaged caches (truncated, bit-flipped, deleted, forged so they verify but do not
load), unusable cache folders under each fallback mode, a symlinked cache folder, and
concurrent writers of one entry; expectations come from what each session's record says.
Last, public models from PyPI wheels (scripts/public_models.json): names OpenVINO's compiled
model gives otherwise, int8 QDQ and dynamically quantized models, string and multi-input
models, each held to what the raw engine underneath does with it; and on QNN a memory failure
of the HTP simulator and an EPContext model that cannot run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from google.protobuf.message import DecodeError  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xpuruntime.inference import InferenceSession  # noqa: E402
from xpuruntime.inference.cache import KEY_FILE, FileDigest, Manifest, file_digest  # noqa: E402
from xpuruntime.inference.errors import (  # noqa: E402
    CacheError,
    EngineMemoryError,
    InputDtypeError,
    InputError,
    InputNameError,
    InputShapeError,
    InvalidModelError,
    SessionClosedError,
)
from xpuruntime.inference.kit.errors import is_memory_failure  # noqa: E402
from xpuruntime.policies.errors import (  # noqa: E402
    PolicyError,
    PolicyValidationError,
    XpuRuntimeError,
)
from xpuruntime.runtime.engines import load_engine  # noqa: E402
from xpuruntime.runtime.errors import FallbackError  # noqa: E402
from xpuruntime.runtime.record import FallbackWarning  # noqa: E402

#: engine -> (device, whether it takes dynamic shapes)
_CANDIDATES = {
    "onnxruntime": ("cpu", True),
    "openvino": ("cpu", True),
    "qnn": ("cpu", False),  # the HTP simulator: QNN's device where no NPU is present
    "tensorrt": ("cuda:0", True),
}


def _present(name: str) -> str:
    """Why ``name`` cannot run here ("" when it can)."""
    try:
        found = load_engine(name).availability()
    except XpuRuntimeError as exc:
        return str(exc)
    if not found.available:
        return found.reason or "not available"
    if name == "tensorrt" and not found.devices:
        return "no CUDA device"
    return ""


ENGINES = [
    pytest.param(name, marks=pytest.mark.skipif(bool(why), reason=f"{name}: {why}"), id=name)
    for name, why in ((n, _present(n)) for n in _CANDIDATES)
]


def _save(graph: Any, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every installed engine reads
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small models built here (seconds to compile on every engine)."""
    root = tmp_path_factory.mktemp("contract")
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "weight")
    # Raw OpenVINO names the compiled input '/Cast_1_output_0' (the no-op Cast's output)
    # and the first output 'h' (the tensor 'logits' is an Identity of): a model whose own
    # names an engine must keep.
    renamed = helper.make_graph(
        [
            helper.make_node("Cast", ["input_0"], ["/Cast_1_output_0"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["/Cast_1_output_0", "weight"], ["h"]),
            helper.make_node("Identity", ["h"], ["logits"]),
            helper.make_node("Softmax", ["h"], ["probs"], axis=-1),
        ],
        "renamed",
        [helper.make_tensor_value_info("input_0", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3]),
        ],
        [weight],
    )
    two_inputs = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Mul", ["a", "b"], ["prod"]),
        ],
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3]),
        ],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("prod", TensorProto.FLOAT, ["n", 3]),
        ],
    )
    return {
        "renamed": _save(renamed, root / "renamed.onnx"),
        "two_inputs": _save(two_inputs, root / "two_inputs.onnx"),
    }


def _open(engine: str, model: Path, batch: int = 2, **settings: Any) -> InferenceSession:
    """A session of ``engine``; engines that need fixed shapes get ``batch`` as every
    symbolic dimension (their tests of other shapes skip)."""
    device, _ = _CANDIDATES[engine]
    if engine == "qnn":
        try:
            inputs = list(onnx.load(str(model), load_external_data=False).graph.input)
        except DecodeError:
            inputs = []  # a damaged file: what the engine says of it is under test
        shapes = {
            i.name: [d.dim_value or batch for d in i.type.tensor_type.shape.dim] for i in inputs
        }
        settings = {"static_shape": True, "input_shapes": shapes, "fallback": "allow", **settings}
    return InferenceSession(model, device=device, engine=engine, **settings)


def _dynamic(engine: str) -> None:
    if not _CANDIDATES[engine][1]:
        pytest.skip(f"{engine} runs fixed shapes only")


def _x(batch: int = 2) -> np.ndarray:
    return np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)


def _expected(x: np.ndarray) -> dict[str, np.ndarray]:
    h = x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return {"logits": h, "probs": e / e.sum(axis=-1, keepdims=True)}


def _close(engine: str) -> dict[str, float]:
    # The HTP computes in reduced precision (emulated here).
    return {"rtol": 5e-2, "atol": 5e-2} if engine == "qnn" else {"rtol": 1e-4, "atol": 1e-5}


# -- names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_the_models_own_names(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["renamed"])
    assert sess.input_names == ["input_0"]
    assert sess.output_names == ["logits", "probs"]
    outputs = sess.run({"input_0": _x()})
    assert list(outputs) == ["logits", "probs"]
    for name, want in _expected(_x()).items():
        np.testing.assert_allclose(np.asarray(outputs[name]), want, **_close(engine))


@pytest.mark.parametrize("engine", ENGINES)
def test_multi_input_model_runs_by_name(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["two_inputs"])
    a = np.ones((2, 3), np.float32)
    b = np.full((2, 3), 2.0, np.float32)
    outputs = sess.run({"b": b, "a": a})  # the feeds' order is not the model's
    np.testing.assert_allclose(outputs["sum"], a + b, **_close(engine))
    np.testing.assert_allclose(outputs["prod"], a * b, **_close(engine))


# -- feeds ------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_feed_conversions_and_refusals(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["renamed"])
    x = _x()
    array_result = sess.run({"input_0": x})
    # A nested list is an array of the input's element type, as ONNX Runtime takes it.
    listed = sess.run({"input_0": x.tolist()})
    for name in array_result:
        np.testing.assert_allclose(listed[name], array_result[name], rtol=1e-6)
    with pytest.raises(InputShapeError, match="ragged"):
        sess.run({"input_0": [[1.0, 2.0, 3.0, 4.0], [1.0]]})
    with pytest.raises(InputNameError, match="strings"):
        sess.run({0: x})  # type: ignore[dict-item]
    with pytest.raises(InputNameError, match="input_0"):
        sess.run({"input0": x})
    with pytest.raises(InputDtypeError, match="float32"):
        sess.run({"input_0": x.astype(np.int32)})
    with pytest.raises(InputError):
        sess.run([x])  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ENGINES)
def test_output_names(engine: str, models: dict[str, Path]) -> None:
    """None and [] both mean every output in model order (ONNX Runtime's meaning of [])."""
    sess = _open(engine, models["renamed"])
    feeds = {"input_0": _x()}
    assert list(sess.run(feeds)) == ["logits", "probs"]
    assert list(sess.run(feeds, [])) == ["logits", "probs"]
    assert list(sess.run(feeds, ["probs"])) == ["probs"]
    assert list(sess.run(feeds, ["probs", "logits"])) == ["probs", "logits"]
    with pytest.raises(InputNameError, match="did you mean 'probs'"):
        sess.run(feeds, ["prob"])
    with pytest.raises(InputNameError, match=r"\['probs'\]"):
        sess.run(feeds, "probs")  # type: ignore[arg-type]


# -- bad models and settings ------------------------------------------------------------------
def _damaged(kind: str, good: Path, folder: Path) -> Path:
    data = good.read_bytes()
    content = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "zeros": bytes(len(data)),
        "text": b"this is a text file, not a model\n" * 20,
        "garbage": bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
    }[kind]
    path = folder / f"{kind}.onnx"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", ["empty", "truncated", "zeros", "text", "garbage"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_model_is_an_invalid_model_error(
    engine: str, kind: str, models: dict[str, Path], tmp_path: Path
) -> None:
    bad = _damaged(kind, models["renamed"], tmp_path)
    before = bad.read_bytes()
    with pytest.raises(InvalidModelError) as caught:
        _open(engine, bad)
    assert str(bad) in str(caught.value)
    assert bad.read_bytes() == before  # never overwritten


@pytest.mark.parametrize("value", [2**31, 100_000])
@pytest.mark.parametrize("engine", ENGINES)
def test_num_threads_outside_the_engines_range(
    engine: str, value: int, models: dict[str, Path]
) -> None:
    """Valid as a policy (>= 1), beyond what engines take: refused before any engine starts
    (ONNX Runtime overflows int32 at 2**31 and spends minutes starting 100000 threads)."""
    with pytest.raises(PolicyValidationError, match=r"num_threads.*outside the range .*\(1 to \d+"):
        _open(engine, models["renamed"], num_threads=value)


@pytest.mark.parametrize("engine", ENGINES)
def test_num_threads_inside_the_range_runs(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["renamed"], num_threads=2)
    assert sess.run({"input_0": _x()})["logits"].shape == (2, 3)


# -- closed sessions, failed runs ---------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_a_closed_session_refuses_to_run(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["renamed"])
    sess.run({"input_0": _x()})
    sess.close()
    sess.close()  # twice is fine
    with pytest.raises(SessionClosedError):
        sess.run({"input_0": _x()})
    with pytest.raises(SessionClosedError):
        sess.engine_session.run({"input_0": _x()})
    assert len(sess.record().runs) == 1  # the record stays readable


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_run_leaves_every_working_shape_working(
    engine: str, models: dict[str, Path]
) -> None:
    _dynamic(engine)
    sess = _open(engine, models["renamed"])
    good = {batch: sess.run({"input_0": _x(batch)}) for batch in (1, 3)}
    with pytest.raises(InputShapeError):
        sess.run({"input_0": np.ones((2, 5), np.float32)})  # a fixed dimension is wrong
    # Batch 0: an engine may run it or refuse it with a typed error, never break on it.
    with contextlib.suppress(XpuRuntimeError):
        sess.run({"input_0": np.ones((0, 4), np.float32)})
    for batch, before in good.items():
        after = sess.run({"input_0": _x(batch)})
        for name in before:
            np.testing.assert_allclose(after[name], before[name], rtol=1e-6)


@pytest.fixture(scope="module")
def allocating(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ConstantOfShape of a runtime shape: asking for 2**42 floats (16 TiB) makes the
    engine's allocator fail, a real out-of-memory report."""
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], value=value)],
        "allocating",
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["size"])],
    )
    return _save(graph, tmp_path_factory.mktemp("alloc") / "allocating.onnx")


@pytest.mark.parametrize("engine", ENGINES)
def test_an_out_of_memory_run_is_named_as_such(engine: str, allocating: Path) -> None:
    _dynamic(engine)
    if engine == "tensorrt":
        pytest.skip("TensorRT fixes output sizes at build time")
    sess = _open(engine, allocating)
    assert sess.run({"shape": np.array([4], np.int64)})["y"].shape == (4,)
    failure: XpuRuntimeError | None = None
    try:
        sess.run({"shape": np.array([2**42], np.int64)})
    except XpuRuntimeError as exc:  # anything else fails the test as it is
        failure = exc
    if isinstance(failure, EngineMemoryError):
        assert "ran out of memory" in str(failure)
        assert "Try smaller inputs" in str(failure)
    elif failure is not None:  # refused otherwise: then the engine's report is no memory failure
        assert not is_memory_failure(failure.__cause__ or failure), failure
    # (An engine may also run it: OpenVINO does, without touching the pages.)
    assert sess.run({"shape": np.array([4], np.int64)})["y"].shape == (4,)


# -- records under concurrency -----------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_records_are_readable_while_runs_are_in_flight(
    engine: str, models: dict[str, Path]
) -> None:
    sess = _open(engine, models["renamed"])
    _readers_and_runners(sess, {"input_0": _x()}, 150 if engine != "qnn" else 20)


# -- precision ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dynamic_int8(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]) -> Path:
    """The model quantized by ONNX Runtime's own dynamic quantization (int8 weights)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    target = tmp_path_factory.mktemp("int8") / "dynamic_int8.onnx"
    quantization.quantize_dynamic(str(models["renamed"]), str(target))
    return target


@pytest.mark.parametrize("engine", ENGINES)
def test_precision_not_set_is_the_models_stored_precision(
    engine: str, dynamic_int8: Path, models: dict[str, Path]
) -> None:
    """No precision asked: the record says what the model stores, on every engine, without
    a fallback (a dynamically quantized model is int8 here, not "requested fp32")."""
    for model, stored in ((models["renamed"], "fp32"), (dynamic_int8, "int8")):
        sess = _open(engine, model)
        record = sess.record()
        assert record.precision is not None
        assert (record.precision.requested, record.precision.chosen) == (None, stored), model
        assert not [f for f in record.fallbacks if f.what == "precision"]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_asked_precision_is_recorded_as_asked(engine: str, models: dict[str, Path]) -> None:
    sess = _open(engine, models["renamed"], precision="fp32")
    record = sess.record()
    assert record.precision is not None
    assert record.precision.requested == "fp32"
    assert record.policy_sources["execution.precision"] == "argument"


# -- the fault battery: caches ----------------------------------------------------------
@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input_0", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["y"]),
        ],
        "faults",
        [helper.make_tensor_value_info("input_0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    return _save(graph, tmp_path_factory.mktemp("faults") / "faults.onnx")


def _cached(engine: str, model: Path, cache: Path, **settings: Any) -> tuple[Any, dict[str, Any]]:
    """A session with ``cache`` as its cache folder, and its cache record (one kind)."""
    sess = _open(engine, model, cache_dir=str(cache), **settings)
    found = sess.record().cache
    kinds = [kind for kind, entry in found.items() if "key" in entry]
    if not kinds:
        pytest.skip(f"{engine} keeps no artifact in cache_dir here ({found})")
    return sess, found[kinds[0]]


def _works(sess: Any, reference: dict[str, np.ndarray]) -> None:
    out = sess.run({"input_0": _x()})
    for name, want in reference.items():
        np.testing.assert_allclose(np.asarray(out[name]), want, rtol=5e-2, atol=5e-2)


def _payload(entry: Path) -> list[Path]:
    return sorted(p for p in entry.rglob("*") if p.is_file() and p.name != KEY_FILE)


def _reference(engine: str, model: Path) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in _open(engine, model).run({"input_0": _x()}).items()}


@pytest.mark.parametrize("damage", ["truncate", "bit_flip", "delete"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_entry_is_a_miss_that_rebuilds(
    engine: str, damage: str, model: Path, tmp_path: Path
) -> None:
    reference = _reference(engine, model)
    _, entry = _cached(engine, model, tmp_path / "cache")
    assert entry["hit"] is False
    _, again = _cached(engine, model, tmp_path / "cache")
    assert again["hit"] is True, again
    target = _payload(Path(entry["path"]))[0]
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "bit_flip":
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        target.write_bytes(bytes(flipped))
    else:
        target.unlink()
    damaged, miss = _cached(engine, model, tmp_path / "cache")
    assert miss["hit"] is False
    assert "damaged" in miss["explanation"], miss
    _works(damaged, reference)
    healed, hit = _cached(engine, model, tmp_path / "cache")
    assert hit["hit"] is True, hit
    _works(healed, reference)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_entry_that_verifies_but_does_not_load_is_discarded(
    engine: str, model: Path, tmp_path: Path
) -> None:
    """The manifest is forged to match garbage payload: only loading can tell. The kit
    discards the entry, rebuilds and records a miss with the engine's reason."""
    # (OpenVINO recompiles silently over a blob it cannot import; its adapter reads the
    # compiled model's LOADED_FROM_CACHE to tell.)
    reference = _reference(engine, model)
    _, entry = _cached(engine, model, tmp_path / "cache")
    folder = Path(entry["path"])
    files = {}
    for path in _payload(folder):
        path.write_bytes(b"not what the engine wrote " * 64)
        files[str(path.relative_to(folder))] = FileDigest(path.stat().st_size, file_digest(path))
    manifest = msgspec.json.decode((folder / KEY_FILE).read_bytes(), type=Manifest)
    forged = msgspec.structs.replace(manifest, files=files)
    (folder / KEY_FILE).write_bytes(msgspec.json.encode(forged))
    sess, miss = _cached(engine, model, tmp_path / "cache")
    assert miss["hit"] is False
    assert "failed to load" in miss["explanation"], miss
    _works(sess, reference)
    _, hit = _cached(engine, model, tmp_path / "cache")
    assert hit["hit"] is True, hit


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unusable_cache_folder_follows_the_fallback_mode(
    engine: str, model: Path, tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the cache folder should be")
    reference = _reference(engine, model)
    with pytest.warns(FallbackWarning, match="cache"):
        sess = _open(engine, model, cache_dir=str(not_a_folder), fallback="warn")
    _works(sess, reference)
    assert any(f.chosen == "no cache" for f in sess.record().fallbacks)
    with pytest.raises(FallbackError, match="cache"):
        _open(engine, model, cache_dir=str(not_a_folder), fallback="error")
    assert not_a_folder.read_text() == "a file where the cache folder should be"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_read_only_cache_folder_follows_the_fallback_mode(
    engine: str, model: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises((FallbackError, CacheError)):
            _open(engine, model, cache_dir=str(folder), fallback="error")
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_symlinked_cache_folder_works(engine: str, model: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    _, first = _cached(engine, model, link)
    assert first["hit"] is False
    _, second = _cached(engine, model, link)
    assert second["hit"] is True
    assert link.is_symlink()


@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_writers_of_one_entry(engine: str, model: Path, tmp_path: Path) -> None:
    """Sessions created at once on one cache folder: all run; afterwards the entry hits."""
    reference = _reference(engine, model)
    cache = tmp_path / "cache"
    sessions: list[Any] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            sessions.append(_open(engine, model, cache_dir=str(cache)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    for sess in sessions:
        _works(sess, reference)
    _, hit = _cached(engine, model, cache)
    assert hit["hit"] is True, hit


# -- public models from PyPI wheels ----------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[4]
PUBLIC = Path(os.environ.get("XPURUNTIME_PUBLIC_MODELS", ROOT / "build" / "public-models"))
CATALOGUE: dict[str, Any] = json.loads((ROOT / "scripts" / "public_models.json").read_text())[
    "models"
]
#: The public models (scripts/public_models.json) the contract runs on every engine: what each
#: brings. No real model with string inputs ships in a wheel we found: the string cases are
#: ONNX's own backend test graphs from the onnx wheel.
PUBLIC_MODELS = {
    "silero_vad_openvino_16k": "two inputs; OpenVINO's compiled model names its output otherwise",
    "silero_vad_16k_op15": "three inputs and If nodes (raw OpenVINO cannot convert it)",
    "magika": "an int32 input",
    "rapidocr_cls": "a '?'-named dynamic image input",
    "smart_turn_v3": "int8 QDQ (a Whisper-tiny encoder)",
    "ddddocr": "dynamically quantized int8 (ConvInteger, MatMulInteger)",
    "label_encoder_strings": "a string input (ai.onnx.ml LabelEncoder to int64)",
    "string_concat": "two string inputs to a string output",
    "strnormalizer": "a string input ONNX Runtime refuses without the en_US.UTF-8 locale",
}
QUANTIZED = [name for name in PUBLIC_MODELS if "quantized" in CATALOGUE[name]]
#: On QNN every public model names its SoC: the HTP simulator keeps the SoC of the first
#: session that named one for the rest of the process, and at the default one its float path
#: cannot hold the silero models (QNN_COMMON_ERROR_MEM_ALLOC, see
#: test_qnn_memory_failure_of_a_public_model), so an unnamed SoC makes results depend on order.
QNN_SOC: dict[str, Any] = {"engine_options": {"qnn": {"soc_model": "69"}}}
#: Models QNN refuses for a reason of its own (it compiles one shape), and what it says.
QNN_REFUSES = {"rapidocr_cls": "'\\?' two values"}  # '?' names height and width alike


def _public(name: str) -> Path:
    path = PUBLIC / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{name} not fetched: python scripts/fetch_public_models.py {PUBLIC}")
    return path


def _strings(name: str) -> bool:
    return any(spec["dtype"] == "str" for spec in CATALOGUE[name]["feeds"].values())


def _public_feeds(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for input_name, item in CATALOGUE[name]["feeds"].items():
        fill = item["fill"]
        if fill == "normal":
            value = rng.standard_normal(item["shape"])
        elif fill == "zeros":
            value = np.zeros(item["shape"])
        elif "int" in fill:
            value = rng.integers(*fill["int"], size=item["shape"])
        elif "strings" in fill:
            value = np.resize(np.array(fill["strings"]), item["shape"])
        else:
            value = np.full(item["shape"], fill["value"])
        feeds[input_name] = value.astype(item["dtype"])
    return feeds


def _open_public(engine: str, name: str, **settings: Any) -> InferenceSession:
    """A session of the public model; QNN gets the feeds' shapes (it compiles one shape)."""
    path = _public(name)
    if engine == "qnn":
        shapes = {k: list(v.shape) for k, v in _public_feeds(name).items()}
        settings = {"input_shapes": shapes, **QNN_SOC, **settings}
    return _open(engine, path, **settings)


def _raw_refusal(engine: str, path: Path) -> str:
    """Why the engine underneath refuses the model ("" when it builds it): raw OpenVINO's
    compile_model for OpenVINO; raw ONNX Runtime for the engines over it (the QNN EP leaves
    to the CPU EP what it does not take, so what the CPU EP refuses, QNN refuses too)."""
    try:
        if engine == "openvino":
            import openvino as ov

            ov.Core().compile_model(str(path), "CPU")
        else:
            import onnxruntime as ort

            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # whatever the engine raises is its refusal
        return f"{type(exc).__name__}: {exc}"
    return ""


def _raw_outputs(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Raw ONNX Runtime's outputs on the CPU EP."""
    import onnxruntime as ort

    raw = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in raw.get_outputs()]
    return dict(zip(names, raw.run(names, feeds), strict=True))


def _assert_like_onnxruntime(
    engine: str, name: str, got: dict[str, Any], want: dict[str, np.ndarray]
) -> None:
    """ONNX Runtime: bit for bit. Other engines' float outputs: within 1e-4 of the output's
    scale (fp32 kernels); int8 models and the HTP within 5e-2 of the scale or of 1 for
    outputs below 1 such as probabilities (int8 kernels round differently, and per CPU: VNNI,
    AVX2's saturating u8 x s8 pairs, AMX; the HTP computes in reduced precision)."""
    for output, expected in want.items():
        value = np.asarray(got[output])
        if engine == "onnxruntime" or expected.dtype.kind not in "fc":
            np.testing.assert_array_equal(value, expected, err_msg=output)
            continue
        scale = float(np.abs(expected).max()) + 1e-6
        loose = engine == "qnn" or "quantized" in CATALOGUE[name]
        atol = 5e-2 * max(scale, 1.0) if loose else 1e-4 * scale
        np.testing.assert_allclose(value, expected, rtol=0, atol=atol, err_msg=output)


def _skip_slow_on_qnn(engine: str, name: str) -> None:
    if engine == "qnn" and "qnn_slow" in CATALOGUE[name]:
        pytest.skip(f"{name} on QNN: {CATALOGUE[name]['qnn_slow']} (nox -s public_models)")


@pytest.mark.parametrize("name", list(PUBLIC_MODELS))
@pytest.mark.parametrize("engine", ENGINES)
def test_public_model_under_the_contract(engine: str, name: str) -> None:
    """Never stricter than the engine underneath: what it refuses is a typed error naming
    the model; what it builds runs with the model's own names, the same outputs, the same
    output_names semantics and feed refusals, and refuses to run once closed."""
    _skip_slow_on_qnn(engine, name)
    path = _public(name)
    if engine == "qnn" and name in QNN_REFUSES:  # input_shapes cannot fix '?' by name
        with pytest.raises(PolicyError, match=QNN_REFUSES[name]):
            _open_public(engine, name)
        return
    refusal = _raw_refusal(engine, path) if engine != "tensorrt" else ""
    if refusal:
        with pytest.raises(XpuRuntimeError) as caught:
            _open_public(engine, name)
        assert path.name in str(caught.value), (refusal, caught.value)
        if engine == "openvino" and _strings(name):
            assert "string tensors" in str(caught.value)
        return
    opened: InferenceSession | XpuRuntimeError
    try:
        opened = _open_public(engine, name)
    except XpuRuntimeError as exc:  # TensorRT: no raw reference here
        opened = exc
    if isinstance(opened, XpuRuntimeError):  # typed, and naming the model
        assert engine == "tensorrt", opened
        assert path.name in str(opened)
        return
    sess = opened
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    outputs = [o.name for o in graph.output]
    assert sess.input_names == inputs
    assert sess.output_names == outputs
    feeds = _public_feeds(name)
    got = sess.run(feeds)
    assert list(got) == outputs
    _assert_like_onnxruntime(engine, name, got, _raw_outputs(path, feeds))
    # output_names: None and [] are every output in model order; a subset in its order.
    assert list(sess.run(feeds, [])) == outputs
    assert list(sess.run(feeds, outputs[::-1])) == outputs[::-1]
    with pytest.raises(InputNameError, match=f"did you mean '{outputs[-1]}'"):
        sess.run(feeds, [outputs[-1] + "x"])
    # Feeds: the model's own input names, its element types.
    first = inputs[0]
    with pytest.raises(InputNameError, match=first):
        sess.run({**{k: v for k, v in feeds.items() if k != first}, first + "x": feeds[first]})
    wrong = np.int64 if feeds[first].dtype.kind in "fU" else np.float32
    with pytest.raises(InputDtypeError):
        sess.run({**feeds, first: np.zeros(feeds[first].shape, wrong)})
    if _strings(name):  # every numpy form of strings, and lists, as ONNX Runtime takes them
        for form in (lambda a: a.astype(object), lambda a: a.tolist(), lambda a: a.astype("str")):
            again = sess.run({k: form(v) for k, v in feeds.items()})
            for output in outputs:
                np.testing.assert_array_equal(np.asarray(again[output]), np.asarray(got[output]))
    sess.close()
    with pytest.raises(SessionClosedError):
        sess.run(feeds)
    assert len(sess.record().runs) == (6 if _strings(name) else 3)  # the runs that ran


@pytest.mark.parametrize("name", [n for n in PUBLIC_MODELS if _strings(n)])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_string_input_of_a_wrong_shape_is_a_shape_error(engine: str, name: str) -> None:
    """As for any input: a wrong fixed dimension is an InputShapeError (not a dtype error
    that suggests x.astype('str') for an array that is str already)."""
    path = _public(name)
    if _raw_refusal(engine, path) or engine == "openvino":
        pytest.skip(f"{engine} does not build {name} here (see the contract test)")
    sess = _open_public(engine, name)
    feeds = _public_feeds(name)
    first = next(iter(feeds))
    longer = np.resize(feeds[first], (feeds[first].shape[0] + 1, *feeds[first].shape[1:]))
    with pytest.raises(InputShapeError, match=first):
        sess.run({**feeds, first: longer})


@pytest.mark.parametrize("engine", ENGINES)
def test_public_model_records_are_readable_while_runs_are_in_flight(engine: str) -> None:
    sess = _open_public(engine, "silero_vad_openvino_16k")
    _readers_and_runners(sess, _public_feeds("silero_vad_openvino_16k"), 30)


@pytest.mark.parametrize("name", QUANTIZED)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_quantized_public_model_is_int8_on_every_engine(engine: str, name: str) -> None:
    """Precision not set: the record says int8 for an int8 QDQ and a dynamically quantized
    model alike, on every engine that builds it, and records no precision fallback."""
    sess = _open_public(engine, name)
    record = sess.record()
    assert record.precision is not None
    assert (record.precision.requested, record.precision.chosen) == (None, "int8"), record.precision
    assert not [f for f in record.fallbacks if f.what == "precision"]


def _qnn_only(engine: str) -> None:
    if engine != "qnn":
        pytest.skip("QNN's own behaviour")


def _raw_qnn_session(path: Path, options: dict[str, str], free_dims: dict[str, int]) -> Any:
    """Raw ONNX Runtime with the QNN EP on the HTP simulator, ONNX Runtime's CPU retry off."""
    import onnxruntime as ort

    from xpuruntime.npu import qnn_backend

    device = next(d for d in qnn_backend.devices() if d.name == "cpu")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for dim, size in free_dims.items():
        so.add_free_dimension_override_by_name(dim, size)
    library = qnn_backend.backend_library("htp")
    so.add_provider_for_devices([device.ep_device], {"backend_path": library, **options})
    with contextlib.redirect_stdout(io.StringIO()):
        raw = ort.InferenceSession(str(path), sess_options=so)
    raw.disable_fallback()
    return raw


#: Run in a fresh process (the HTP simulator's SoC is process state, see QNN_SOC): raw ONNX
#: Runtime with the QNN EP at the default SoC, then xpuruntime the same way; prints JSON.
_FRESH_HTP = """
import json, sys
import numpy as np
import onnxruntime as ort
from xpuruntime.inference import InferenceSession
from xpuruntime.inference.kit.errors import is_memory_failure
from xpuruntime.npu import qnn_backend

path, shapes = sys.argv[1], json.loads(sys.argv[2])
device = next(d for d in qnn_backend.devices() if d.name == "cpu")
so = ort.SessionOptions()
so.log_severity_level = 4
options = {"htp_performance_mode": "burst", "enable_htp_fp16_precision": "0"}
so.add_provider_for_devices(
    [device.ep_device], {"backend_path": qnn_backend.backend_library("htp"), **options}
)
found = {}
try:
    ort.InferenceSession(path, sess_options=so)
except Exception as exc:
    found["raw"] = [is_memory_failure(exc), str(exc)]
try:
    InferenceSession(path, device="cpu", engine="qnn", static_shape=True, input_shapes=shapes)
except Exception as exc:
    found["xpuruntime"] = [type(exc).__name__, str(exc)]
print(json.dumps(found))
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_qnn_memory_failure_of_a_public_model(engine: str) -> None:
    """QNN_COMMON_ERROR_MEM_ALLOC on a valid model (at the default SoC, the HTP simulator's
    float path cannot hold silero_vad_openvino_16k; raw ONNX Runtime with the QNN EP fails
    the same way) is an EngineMemoryError that says what to try, and what it says (fp16)
    runs the model."""
    _qnn_only(engine)
    name = "silero_vad_openvino_16k"
    path = _public(name)
    feeds = _public_feeds(name)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    fresh = subprocess.run(
        [sys.executable, "-c", _FRESH_HTP, str(path), json.dumps(shapes)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    found = json.loads(fresh.stdout.strip().splitlines()[-1])
    if not found.get("raw", [False])[0]:
        assert "xpuruntime" not in found, found  # never stricter than the engine
        pytest.skip(f"the HTP simulator holds {name} at the default SoC here: {found}")
    kind, message = found["xpuruntime"]
    assert kind == "EngineMemoryError", found
    assert "QNN_COMMON_ERROR_MEM_ALLOC" in message
    assert "ran out of memory" in message
    assert "precision='fp16'" in message
    sess = _open_public(engine, name, precision="fp16")
    _assert_like_onnxruntime(engine, name, sess.run(feeds), _raw_outputs(path, feeds))


@pytest.mark.parametrize("engine", ENGINES)
def test_qnn_context_cache_of_a_model_qnn_cannot_run(engine: str, tmp_path: Path) -> None:
    """ddddocr's captcha model with its width fixed: QNN builds its graph from the model's
    declared output shape ([1, 19], stale for other widths) and fails at every run ("ORT
    Tensor data size does not match QNN tensor data size"), the fresh model and the EPContext
    model ONNX Runtime writes alike. The session runs on the CPU EP as ONNX Runtime's own retry
    would, recorded as a fallback; the context model, which the CPU EP cannot run, is not
    cached, so the next session builds again instead of failing on a stored entry."""
    _qnn_only(engine)
    name = "ddddocr"
    path = _public(name)
    feeds = _public_feeds(name)
    # xpuruntime's provider options for it (QNN_SOC, fp32), its width fixed by name.
    options = {"htp_performance_mode": "burst", "enable_htp_fp16_precision": "0", "soc_model": "69"}
    raw = _raw_qnn_session(path, options, {"image_wdith": 128})
    try:
        raw.run(None, feeds)
    except Exception as exc:  # what the engine underneath says of it
        raw_failure = str(exc)
    else:
        raw_failure = ""
    want = _raw_outputs(path, feeds)
    for attempt in range(2):  # the second session finds what the first one left
        sess = _open_public(engine, name, cache_dir=str(tmp_path / "cache"))
        np.testing.assert_array_equal(sess.run(feeds)["output"], want["output"])
        record = sess.record()
        moved = [f for f in record.fallbacks if f.what == "execution provider"]
        cache = record.cache["qnn"]
        if raw_failure:
            assert len(moved) == 1, moved
            assert "failed while running" in moved[0].reason
            assert moved[0].chosen == "CPUExecutionProvider"
            assert cache["hit"] is False, (attempt, cache)
            assert cache["stored"] is False, (attempt, cache)
        else:  # a QNN release that runs it: no fallback, and the entry serves later sessions
            assert not moved, moved
            assert cache["hit"] is (attempt > 0), (attempt, cache)


def _readers_and_runners(sess: Any, feeds: dict[str, Any], runs_per_runner: int) -> None:
    """Reader threads call record()/explain() while two runner threads run: no exception, and
    every snapshot is consistent (its runs numbered in order)."""
    errors: list[BaseException] = []
    stop = threading.Event()
    before = len(sess.record().runs)

    def runner() -> None:
        try:
            for _ in range(runs_per_runner):
                sess.run(feeds)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                record = sess.record()
                indices = [r.index for r in record.runs]
                assert indices == sorted(indices)
                sess.explain()
        except BaseException as exc:  # reported below
            errors.append(exc)

    runners = [threading.Thread(target=runner) for _ in range(2)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers + runners:
        thread.start()
    for thread in runners:
        thread.join(timeout=120)
    stop.set()
    for thread in readers:
        thread.join(timeout=30)
    assert not errors, errors
    assert len(sess.record().runs) == before + 2 * runs_per_runner
