#!/usr/bin/env bash
# GPU phase: xrt_flash against cuDNN SDPA and SDPA-flash (TFLOP/s, forward and backward).
set -uo pipefail
python3 benchmarks/attention_bench.py ${ATTENTION_ARGS:-} --out "${1:-.}"
