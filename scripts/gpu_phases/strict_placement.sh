#!/usr/bin/env bash
# GPU phase (scripts/gpu_check.sh strict_placement): strict placement on the CUDA EP.
# The public models (.device/models/, made here with
# `python scripts/fetch_public_models.py .device/models`) run under fallback="error" against
# raw ONNX Runtime CUDA, then the inference GPU tests (strict mode, I/O binding).
# Look for: 6 passed in test_public_models.py's CUDA cases, each printing
# "<model>: N nodes, {'requested': R, 'host_shape': H, 'fallback': 0}".
set -uo pipefail
export XPURUNTIME_PUBLIC_MODELS=${XPURUNTIME_PUBLIC_MODELS:-$PWD/.device/models}
python3 -m pytest -p no:cacheprovider -q -rs -s \
  packages/xpuruntime-inference/tests/test_public_models.py \
  packages/xpuruntime-inference/tests/test_strict.py \
  packages/xpuruntime-inference/tests/test_gpu.py
