#!/usr/bin/env bash
# GPU phase: compute-sanitizer memcheck and racecheck over the GEMM paths, the norm kernels
# (C++ test driver; also synccheck and initcheck) and xrt_flash (tiny sizes).
# SANITIZE_PARTS picks some of "gemm norms attention" (default: all three).
set -uo pipefail
LOGS=${1:-.}
PARTS=${SANITIZE_PARTS:-gemm norms attention}
status=0
for part in $PARTS; do
  case $part in
    gemm) OUT=$LOGS bash packages/xpuruntime-core/scripts/compute_sanitizer.sh || status=1 ;;
    # The norms' quick grid (every launch shape, fewer sizes) keeps the phase within minutes.
    norms) OUT=$LOGS/norms BUILD=/tmp/native-gpu XPURUNTIME_NORM_CHECK_QUICK=1 \
      bash packages/xpuruntime-core/scripts/norm_sanitize.sh || status=1 ;;
    attention) OUT=$LOGS bash packages/xpuruntime-core/scripts/attention_sanitize.sh || status=1 ;;
    *) echo "sanitize: unknown part $part"; status=1 ;;
  esac
done
exit $status
