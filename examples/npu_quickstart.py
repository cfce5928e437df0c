"""Seed quick start (NPU): int8, static shapes, on an NPU through OpenVINO or QNN.

    python examples/npu_quickstart.py --backend openvino    # pip install xpuruntime[openvino]
    python examples/npu_quickstart.py --backend qnn         # pip install xpuruntime[qnn]

Without an NPU, `fallback="warn"` lets the session run on the backend's CPU/simulator and
the record (printed) says so; `fallback="error"` would refuse.
"""

from __future__ import annotations

import argparse

import xpuruntime as xrt
from xpuruntime.inference.demo import DEMO_MODEL, demo_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["openvino", "qnn"], default="openvino")
    parser.add_argument("--model", default=str(DEMO_MODEL))
    args = parser.parse_args()

    sess = xrt.InferenceSession(
        args.model,
        device="npu",
        backend=args.backend,
        exec_policy=xrt.ExecutionPolicy(precision="int8", static_shape=True, fallback="warn"),
    )
    out = sess.run({sess.inputs[0].name: demo_images(4)})
    print({name: getattr(v, "shape", None) for name, v in out.items()})
    print(sess.explain())


if __name__ == "__main__":
    main()
