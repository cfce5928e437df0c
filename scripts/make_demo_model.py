#!/usr/bin/env python3
"""Generate the demo model shipped with xpuruntime-inference, reproducibly.

A small convolutional classifier (Conv 3x3 -> Relu -> MaxPool -> Flatten -> Gemm -> Relu ->
Gemm -> Softmax) over 8x8 single-channel images, 10 classes, with weights drawn from a
fixed-seed generator. The same inputs give the same bytes on every machine (a test checks
the committed file against this script).

    python scripts/make_demo_model.py            # rewrites the packaged demo.onnx
    python scripts/make_demo_model.py -o out.onnx
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20260101
OPSET = 17
# IR 8 loads in every ONNX Runtime the package supports (>= 1.20).
IR_VERSION = 8
DEFAULT_OUTPUT = (
    Path(__file__).resolve().parent.parent
    / "packages/xpuruntime-inference/src/xpuruntime/inference/data/demo.onnx"
)


def build_demo_model() -> onnx.ModelProto:
    """The demo classifier, with deterministic weights."""
    rng = np.random.default_rng(SEED)

    def weights(name: str, *shape: int, scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    initializers = [
        weights("conv.weight", 4, 1, 3, 3, scale=0.5),
        weights("conv.bias", 4, scale=0.1),
        weights("fc1.weight", 64, 16, scale=0.25),
        weights("fc1.bias", 16, scale=0.1),
        weights("fc2.weight", 16, 10, scale=0.5),
        weights("fc2.bias", 10, scale=0.1),
    ]
    nodes = [
        helper.make_node(
            "Conv",
            ["image", "conv.weight", "conv.bias"],
            ["conv"],
            name="conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["conv"], ["conv_relu"], name="conv_relu"),
        helper.make_node(
            "MaxPool", ["conv_relu"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1"], name="fc1"),
        helper.make_node("Relu", ["fc1"], ["fc1_relu"], name="fc1_relu"),
        helper.make_node("Gemm", ["fc1_relu", "fc2.weight", "fc2.bias"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "xpuruntime_demo_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="xpuruntime scripts/make_demo_model.py",
        producer_version="1",
        doc_string=f"Demo classifier for `xpuruntime demo` (seed {SEED}).",
    )
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(build_demo_model().SerializeToString(deterministic=True))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
