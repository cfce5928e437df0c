"""Public models from PyPI wheels (``scripts/public_models.json``) on OpenVINO's CPU plugin:
the model's own names (also where OpenVINO's compiled model names an output otherwise:
silero_vad_openvino_16k), outputs equal to raw ONNX Runtime's (within a quantization step
for int8 models), and a typed error naming the operations, or the string tensors, for a model
raw OpenVINO cannot convert. Skipped (saying how to fetch them) where
``scripts/fetch_public_models.py`` has not been run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino", reason="openvino is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime gives the reference outputs")

from xpuruntime.inference import InferenceSession  # noqa: E402
from xpuruntime.runtime.errors import UnsupportedOperationError  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE = ROOT / "scripts" / "public_models.json"
MODELS = json.loads(CATALOGUE.read_text())["models"] if CATALOGUE.is_file() else {}
FOLDER = Path(os.environ.get("XPURUNTIME_PUBLIC_MODELS", ROOT / "build" / "public-models"))


def _feeds(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for input_name, spec in MODELS[name]["feeds"].items():
        shape, fill = spec["shape"], spec["fill"]
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
        feeds[input_name] = np.asarray(value).astype(spec["dtype"])
    return feeds


def _raw_openvino_refusal(path: Path) -> Exception | None:
    import openvino as ov

    try:
        ov.Core().compile_model(str(path), "CPU")
    except RuntimeError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", sorted(MODELS))
def test_public_model_on_openvino(name):
    path = FOLDER / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is missing: run python scripts/fetch_public_models.py {FOLDER}")
    if _raw_openvino_refusal(path) is not None:
        # silero-vad: If branches of dynamic rank; onnx's graphs: string tensors
        strings = any(s["dtype"] == "str" for s in MODELS[name]["feeds"].values())
        why = "are string tensors" if strings else "no conversion for the operation"
        with pytest.raises(UnsupportedOperationError, match=why):
            InferenceSession(path, engine="openvino", device="cpu")
        return
    raw = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in raw.get_outputs()]
    feeds = _feeds(name)
    want = dict(zip(names, raw.run(names, feeds), strict=True))
    session = InferenceSession(path, engine="openvino", device="cpu", fallback="error")
    assert session.input_names == [i.name for i in raw.get_inputs()]
    got = session.run(feeds)
    assert list(got) == names
    # fp32 kernels of two engines: 1e-4 of the output's scale. int8 ones round differently
    # (and per CPU: VNNI, AVX2's saturating u8 x s8 pairs, AMX): 5e-2 of it.
    share = 5e-2 if "quantized" in MODELS[name] else 1e-4
    for output in names:
        scale = float(np.abs(want[output]).max()) + 1e-6
        np.testing.assert_allclose(got[output], want[output], rtol=0, atol=share * scale)
