#!/usr/bin/env bash
# GPU phase: the core's GPU tests (GEMM family, norms, xrt_flash attention, lock replay) and the
# CLI/engine-log tests. Reads: the pytest summary; attention prints per-tensor errors vs flash.
set -uo pipefail
python3 -m pytest -p no:cacheprovider -q -rs -s --timeout 300 -m "gpu or not gpu" \
  packages/xpuruntime-core/tests
