#!/usr/bin/env bash
# GPU phase: the PyTorch extension's GPU tests (policy switches, fused ops, norms, xrt_flash,
# lock, explain) and the training/inference parity table's CUDA column.
set -uo pipefail
python3 -m pytest -p no:cacheprovider -q -rs --timeout 300 -m gpu \
  packages/xpuruntime-torch/tests packages/xpuruntime/tests/backends/test_training_parity.py
