"""Seed quick start (inference): run a model under an explicit policy and see what ran.

    python examples/inference_quickstart.py                       # embedded demo model, CPU
    python examples/inference_quickstart.py --device cuda:0 --engine tensorrt --fp16 model.onnx

Needs `pip install xpuruntime[cpu]` (or `[cuda]` / `[tensorrt]` for the GPU forms).
"""

from __future__ import annotations

import argparse

import numpy as np

import xpuruntime as xrt
from xpuruntime.inference.demo import DEMO_MODEL, demo_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(DEMO_MODEL))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engine", default="onnxruntime")
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()

    # The seed's policy; on the CPU the pinned GPU kernels do not apply and the record says so.
    policy = xrt.KernelPolicy(matmul="cublasLt", attention="flash_v2")
    sess = xrt.InferenceSession(
        model=args.model,
        device=args.device,
        engine=args.engine,
        kernel_policy=policy if args.device.startswith("cuda") else None,
        fp16=args.fp16,
    )
    first = sess.inputs[0]
    x = (
        demo_images(4)
        if args.model == str(DEMO_MODEL)
        else np.zeros([d if isinstance(d, int) else 1 for d in first.shape], dtype=first.dtype)
    )
    out = sess.run({first.name: x})
    for name, value in out.items():
        print(name, np.asarray(value).shape)
    print(sess.explain())


if __name__ == "__main__":
    main()
