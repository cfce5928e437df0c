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
"""

from __future__ import annotations

import contextlib
import os
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
from xpuruntime.policies.errors import PolicyValidationError, XpuRuntimeError  # noqa: E402
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
    """Reader threads call record()/explain() while runner threads run: no exception, and
    every snapshot is consistent (its runs numbered in order)."""
    sess = _open(engine, models["renamed"])
    feeds = {"input_0": _x()}
    errors: list[BaseException] = []
    stop = threading.Event()
    runs_per_runner = 150 if engine != "qnn" else 20

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
    assert len(sess.record().runs) == 2 * runs_per_runner


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


# -- string inputs and public models -------------------------------------------------------------
@pytest.fixture(scope="module")
def string_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A string input (a text classifier's front end): upper-cased by StringNormalizer."""
    graph = helper.make_graph(
        [
            helper.make_node(
                "StringNormalizer", ["text"], ["normalized"], case_change_action="UPPER"
            )
        ],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("normalized", TensorProto.STRING, [2])],
    )
    return _save(graph, tmp_path_factory.mktemp("strings") / "strings.onnx")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_string_input_runs_or_is_a_typed_refusal(engine: str, string_model: Path) -> None:
    """Never stricter than the engine: where it takes strings, str arrays of any numpy form
    run; where it cannot, the refusal is typed and says so."""
    try:
        sess = _open(engine, string_model)
    except XpuRuntimeError as exc:  # an engine without string tensors (OpenVINO's CPU plugin)
        refusal: XpuRuntimeError | None = exc
    else:
        refusal = None
        for feed in (np.array(["ab", "cd"]), np.array(["ab", "cd"], dtype=object), ["ab", "cd"]):
            out = sess.run({"text": feed})["normalized"]
            assert [str(v) for v in out] == ["AB", "CD"]
    if refusal is not None:
        assert "string" in str(refusal).lower()


ROOT = Path(__file__).resolve().parents[4]
PUBLIC = Path(os.environ.get("XPURUNTIME_PUBLIC_MODELS", ROOT / "build" / "public-models"))
CATALOGUE = ROOT / "scripts" / "public_models.json"
#: Public models from PyPI wheels: multi-input stateful (silero_vad_16k_op15: 3 inputs), an
#: int32 input (magika), a '?'-named dynamic image input (rapidocr_cls).
PUBLIC_MODELS = ("silero_vad_16k_op15", "magika", "rapidocr_cls")


def _public_feeds(name: str) -> dict[str, np.ndarray]:
    import json

    spec = json.loads(CATALOGUE.read_text())["models"][name]["feeds"]
    rng = np.random.default_rng(0)
    feeds = {}
    for input_name, item in spec.items():
        fill = item["fill"]
        if fill == "normal":
            value = rng.standard_normal(item["shape"])
        elif fill == "zeros":
            value = np.zeros(item["shape"])
        elif "int" in fill:
            value = rng.integers(*fill["int"], size=item["shape"])
        else:
            value = np.full(item["shape"], fill["value"])
        feeds[input_name] = value.astype(item["dtype"])
    return feeds


@pytest.mark.parametrize("name", PUBLIC_MODELS)
@pytest.mark.parametrize("engine", ENGINES)
def test_public_models_keep_their_names(engine: str, name: str) -> None:
    """The model's own names on every engine that runs it, and a typed refusal elsewhere;
    on ONNX Runtime the outputs equal raw ONNX Runtime's bit for bit."""
    path = PUBLIC / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{name} not fetched: python scripts/fetch_public_models.py {PUBLIC}")
    if engine == "qnn":
        pytest.skip("QNN's public-model runs (HTP simulation, minutes) are in nox -s public_models")
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    outputs = [o.name for o in graph.output]
    try:
        sess = _open(engine, path)
    except XpuRuntimeError as exc:  # e.g. OpenVINO cannot convert an op of the model
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:  # typed (anything else fails the test), and it names the model
        assert str(path) in refusal, refusal
        return
    assert sess.input_names == inputs
    assert sess.output_names == outputs
    feeds = _public_feeds(name)
    got = sess.run(feeds)
    assert list(got) == outputs
    if engine == "onnxruntime":
        import onnxruntime as ort

        raw = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for output, want in zip(outputs, raw.run(outputs, feeds), strict=True):
            np.testing.assert_array_equal(np.asarray(got[output]), want)
