#!/usr/bin/env bash
# GPU phase: op host overhead, the cuBLASLt grid and the fused epilogues, each against PyTorch
# in the same run. $1: the log folder (JSON results go there).
set -uo pipefail
LOGS=${1:-.}
python3 benchmarks/op_overhead.py --device cuda --json "$LOGS/op_overhead.json"
python3 benchmarks/cublaslt_grid.py ${GRID_ARGS:-} --json "$LOGS/cublaslt_grid.json"
python3 benchmarks/epilogues.py ${EPILOGUE_ARGS:-} --json "$LOGS/epilogues.json"
