#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over xrt_flash's Triton kernels (tiny sizes).
# Run from the repository root on a GPU machine with the core importable:
#   bash packages/xpuruntime-core/scripts/attention_sanitize.sh
# Each tool's log goes to $OUT (default ./device-out); the last line of each says
# "ERROR SUMMARY: 0 errors" when clean. Exit status: non-zero if any tool found errors, or if
# racecheck reported anything but the warp-specialisation hand-off (racecheck_triage.py).
set -uo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
SCRIPT="$(dirname "$0")/attention_sanitize.py"
# PyTorch's caching allocator hides out-of-bounds accesses inside its large blocks.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
# Compile the kernels once outside the sanitizer (it slows Triton's first launches too).
python3 "$SCRIPT" >"$OUT/sanitize_warmup.log" 2>&1 || { tail -20 "$OUT/sanitize_warmup.log"; exit 1; }
status=0
for tool in memcheck racecheck; do
  compute-sanitizer --tool "$tool" --print-limit 20 python3 "$SCRIPT" >"$OUT/sanitize_$tool.log" 2>&1
  rc=$?
  echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
  [ $rc -eq 0 ] || status=1
done
# racecheck's reports: the Gluon kernels' warp-specialisation hand-off, or new (a failure).
python3 "$(dirname "$0")/racecheck_triage.py" "$OUT/sanitize_racecheck.log" || status=1
exit $status
