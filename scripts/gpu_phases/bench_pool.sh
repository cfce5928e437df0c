#!/usr/bin/env bash
# GPU phase: the session pool on the GPUs present (one GPU: single-device figures).
set -uo pipefail
python3 benchmarks/session_pool.py ${POOL_ARGS:---quick} --out "${1:-.}"
