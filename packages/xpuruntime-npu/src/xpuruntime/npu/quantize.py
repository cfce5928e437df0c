"""Post-training int8 quantization for NPUs with the field's libraries, on real calibration data.

- OpenVINO: NNCF (``pip install 'xpuruntime-npu[nncf]'``) quantizes the model read by
  OpenVINO and writes OpenVINO IR (``.xml`` + ``.bin``) with FakeQuantize nodes.
- QNN: ``onnxruntime.quantization`` with its QNN configuration writes a static QDQ ONNX model
  (uint8/uint16 activations, uint8 weights: the types the HTP runs).

Calibration data are input feeds (``{input name: array}``) representative of real use:
the quantization ranges come from them, so made-up data gives a model that is fast and wrong.
The result is what ``ExecutionPolicy(precision="int8", quantized_model=...)`` loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from xpuruntime.runtime.errors import EngineNotInstalledError

Feeds = Mapping[str, np.ndarray]

NNCF_HINT = "pip install 'xpuruntime-npu[nncf]'"


def _feeds(calibration: Iterable[Feeds]) -> list[dict[str, np.ndarray]]:
    data = [{k: np.asarray(v) for k, v in feeds.items()} for feeds in calibration]
    if not data:
        raise ValueError("calibration is empty: give at least one input feed (ideally 100+)")
    return data


def quantize_for_openvino(
    model: str | Path,
    calibration: Iterable[Feeds],
    output: str | Path,
    *,
    preset: Literal["performance", "mixed"] = "performance",
) -> Path:
    """Quantize ``model`` (ONNX or IR) to int8 with NNCF; writes ``output`` (.xml) and its .bin."""
    try:
        import nncf
    except ImportError as exc:
        raise EngineNotInstalledError(
            f"NNCF is not installed ({exc}). Install it with: {NNCF_HINT}"
        ) from exc
    from xpuruntime.npu import openvino_backend

    ov = openvino_backend.import_openvino()
    data = _feeds(calibration)
    quantized = nncf.quantize(
        openvino_backend.core().read_model(str(model)),
        nncf.Dataset(data),
        preset=nncf.QuantizationPreset(preset),
        subset_size=len(data),
    )
    target = Path(output).with_suffix(".xml")
    ov.save_model(quantized, str(target))
    return target


def _reader(data: list[dict[str, np.ndarray]]) -> Any:
    """An onnxruntime.quantization CalibrationDataReader over ``data`` (imported lazily)."""
    from onnxruntime.quantization import CalibrationDataReader

    class FeedsReader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = iter(data)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

        def rewind(self) -> None:
            self._it = iter(data)

    return FeedsReader()


def quantize_for_qnn(
    model: str | Path,
    calibration: Iterable[Feeds],
    output: str | Path,
    *,
    activation_type: Literal["uint8", "uint16"] = "uint8",
) -> Path:
    """Static QDQ quantization for the QNN HTP (onnxruntime.quantization's QNN config)."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    config = get_qnn_qdq_config(
        str(model),
        _reader(_feeds(calibration)),
        activation_type=QuantType.QUInt16 if activation_type == "uint16" else QuantType.QUInt8,
        weight_type=QuantType.QUInt8,
    )
    target = Path(output)
    quantize(str(model), str(target), config)
    return target
