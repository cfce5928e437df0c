#!/usr/bin/env bash
# GPU phase: the pool, dispatcher and DLPack figures, and the PyTorch extension's (graph
# capture, core pool as PyTorch's allocator), each against its peer in the same run.
set -uo pipefail
LOGS=${1:-.}
python3 benchmarks/core_bench.py --json "$LOGS/core_bench.json"
python3 benchmarks/torch_bench.py --out "$LOGS"
