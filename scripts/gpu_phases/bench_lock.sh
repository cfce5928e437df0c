#!/usr/bin/env bash
# GPU phase: a cuBLASLt grid recorded, then replayed in fresh processes; the SDPA lock.
set -uo pipefail
python3 benchmarks/lock_replay.py --json "${1:-.}/lock_replay.json"
