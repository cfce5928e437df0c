#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the core's CUDA GEMM paths (cuBLASLt plans and
# timing, cuBLAS, epilogues, the activation-gradient and fill kernels), on the GPU machine.
# Run from the repository root after `scripts/gpu_check.sh build` has put the core into /tmp/site (or
# with the core importable some other way):
#   bash packages/xpuruntime-core/scripts/compute_sanitizer.sh
# Logs go to $OUT (default ./device-out); each tool's summary line is printed. A clean run
# prints "ERROR SUMMARY: 0 errors" for memcheck and "RACECHECK SUMMARY: 0 hazards" for
# racecheck.
set -uo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD/packages/xpuruntime-policies/src}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
DRIVER=packages/xpuruntime-core/scripts/gemm_sanitizer_driver.py
status=0
for tool in memcheck racecheck; do
  "$SAN" --tool "$tool" --error-exitcode 9 --print-limit 50 \
    python3 "$DRIVER" >"$OUT/sanitizer-$tool.log" 2>&1
  rc=$?
  echo "$tool rc=$rc"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|all paths ran|Error|error" "$OUT/sanitizer-$tool.log" | tail -5
  [ $rc -eq 0 ] || status=1
done
exit $status
