#!/usr/bin/env bash
# GPU phase: inference on the CUDA execution provider: the inference GPU tests (strict
# placement, I/O binding, lock, pool, CLI logs) and the public models under fallback='error'
# (each prints "<model>: N nodes, {'requested': R, 'host_shape': H, 'fallback': 0}").
set -uo pipefail
export XPURUNTIME_PUBLIC_MODELS=${XPURUNTIME_PUBLIC_MODELS:-$PWD/.device/models}
python3 -m pytest -p no:cacheprovider -q -rs -s --timeout 300 -m gpu \
  packages/xpuruntime-inference/tests
