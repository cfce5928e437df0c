#!/usr/bin/env bash
# GPU phase: compute-sanitizer memcheck and racecheck over the GEMM paths, the norm kernels
# (C++ test driver; also synccheck and initcheck), xrt_flash and xrt_flash_fp8 (tiny sizes).
# SANITIZE_PARTS picks some of "gemm norms attention attention_fp8" (default: all four).
set -uo pipefail
LOGS=${1:-.}
PARTS=${SANITIZE_PARTS:-gemm norms attention attention_fp8}
status=0
for part in $PARTS; do
  case $part in
    gemm) OUT=$LOGS bash packages/xpuruntime-core/scripts/compute_sanitizer.sh || status=1 ;;
    # The norms' quick grid (every launch shape, fewer sizes) keeps the phase within minutes.
    norms) OUT=$LOGS/norms BUILD=/tmp/native-gpu XPURUNTIME_NORM_CHECK_QUICK=1 \
      bash packages/xpuruntime-core/scripts/norm_sanitize.sh || status=1 ;;
    attention) OUT=$LOGS bash packages/xpuruntime-core/scripts/attention_sanitize.sh || status=1 ;;
    attention_fp8) FP8_PARTS=sanitize bash scripts/gpu_phases/attention_fp8.sh "$LOGS" || status=1 ;;
    *) echo "sanitize: unknown part $part"; status=1 ;;
  esac
done
exit $status
