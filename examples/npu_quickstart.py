"""Seed quick start (NPU): int8, static shapes, on an NPU through OpenVINO or QNN.

    python examples/npu_quickstart.py --backend openvino    # pip install xpuruntime[openvino]
    python examples/npu_quickstart.py --backend qnn         # pip install xpuruntime[qnn]

int8 needs a quantized model: the demo model is quantized for real first (NNCF for
OpenVINO, onnxruntime.quantization QDQ for QNN) on calibration images. Without an NPU,
`fallback="warn"` lets the session run on the backend's CPU plugin or HTP simulator and the
record (printed) says so; `fallback="error"` would refuse.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx

import xpuruntime as xrt
from xpuruntime.inference.demo import DEMO_MODEL, demo_images
from xpuruntime.npu.quantize import quantize_for_openvino, quantize_for_qnn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["openvino", "qnn"], default="openvino")
    args = parser.parse_args()

    input_name = onnx.load(str(DEMO_MODEL)).graph.input[0].name
    batch = demo_images(4)
    calibration = [{input_name: images} for images in np.split(demo_images(32), 8)]
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "openvino":
            quantized = quantize_for_openvino(DEMO_MODEL, calibration, Path(tmp) / "demo.int8.xml")
        else:
            quantized = quantize_for_qnn(DEMO_MODEL, calibration, Path(tmp) / "demo.qdq.onnx")

        sess = xrt.InferenceSession(
            str(DEMO_MODEL),
            device="npu",
            backend=args.backend,
            exec_policy=xrt.ExecutionPolicy(
                precision="int8",
                static_shape=True,
                input_shapes={input_name: list(batch.shape)},
                quantized_model=str(quantized),
                fallback="warn",
            ),
        )
        out = sess.run({input_name: batch})
    print({name: np.asarray(value).shape for name, value in out.items()})
    print(sess.explain())


if __name__ == "__main__":
    main()
