#!/usr/bin/env bash
# GPU phase: fused_attention pinned to each PyTorch SDPA backend (its ATen entry point) against
# that backend through SDPA, forward and training, plus host time per call.
set -uo pipefail
python3 benchmarks/sdpa_entry_bench.py ${SDPA_ARGS:-} --out "${1:-.}"
