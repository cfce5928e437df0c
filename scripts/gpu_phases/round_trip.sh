#!/usr/bin/env bash
# GPU phase: the training-to-inference round trip's CUDA column. Bundles are trained and
# exported here (PyTorch on the CPU, a few steps under a strict policy), then served on ONNX
# Runtime's CUDA execution provider: verify() and a batch/sequence other than the exported.
# Needs: the build phase and onnxruntime-gpu (setup from /tmp/parts).
set -uo pipefail
python3 -m pytest -p no:cacheprovider -q -rs --timeout 300 -m gpu \
  packages/xpuruntime/tests/backends/test_round_trip.py
