#!/usr/bin/env bash
# GPU phase: the PyTorch extension's GPU tests (policy switches, fused ops, norms, xrt_flash,
# lock, explain) and the training/inference parity table's CUDA column.
set -uo pipefail
# TORCH_TESTS: pytest arguments selecting a part (default: all of the above).
# shellcheck disable=SC2086
python3 -m pytest -p no:cacheprovider -q -rs --timeout 300 -m gpu \
  ${TORCH_TESTS:-packages/xpuruntime-torch/tests packages/xpuruntime/tests/backends/test_training_parity.py}
