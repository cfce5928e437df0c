#!/usr/bin/env bash
# GPU phase: compute-sanitizer memcheck and racecheck over the GEMM paths, the norm kernels
# (C++ test driver; also synccheck and initcheck) and xrt_flash (tiny sizes).
set -uo pipefail
LOGS=${1:-.}
status=0
OUT=$LOGS bash packages/xpuruntime-core/scripts/compute_sanitizer.sh || status=1
# The norms' quick grid (every launch shape, fewer sizes) keeps the phase within minutes.
OUT=$LOGS/norms BUILD=/tmp/native-gpu XPURUNTIME_NORM_CHECK_QUICK=1 bash packages/xpuruntime-core/scripts/norm_sanitize.sh || status=1
OUT=$LOGS bash packages/xpuruntime-core/scripts/attention_sanitize.sh || status=1
exit $status
