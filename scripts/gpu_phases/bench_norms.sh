#!/usr/bin/env bash
# GPU phase: LayerNorm/RMSNorm forward and backward against PyTorch and the run's copy bandwidth.
set -uo pipefail
python3 benchmarks/norms_bench.py ${NORMS_ARGS:-} --out "${1:-.}"
