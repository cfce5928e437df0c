#!/usr/bin/env bash
# GPU phase: the core's GPU tests (GEMM family, norms, xrt_flash attention, lock replay) and the
# CLI/engine-log tests. Reads: the pytest summary; attention prints per-tensor errors vs flash.
# CORE_TESTS: pytest arguments selecting a part (default: the whole core suite).
set -uo pipefail
# shellcheck disable=SC2086
python3 -m pytest -p no:cacheprovider -q -rs -s --timeout 300 -m "gpu or not gpu" \
  ${CORE_TESTS:-packages/xpuruntime-core/tests}
