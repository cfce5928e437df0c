#!/usr/bin/env bash
# The norm kernels under compute-sanitizer, on a GPU machine. From the repository root:
#   bash packages/xpuruntime-core/scripts/norm_sanitize.sh
# Builds native/ with CUDA and its C++ tests into $BUILD (default /tmp/norm-sanitize) and runs
# tests/test_norms, which checks every CUDA norm kernel against the CPU reference over all
# launch shapes (vectorised and generic paths, residual form, optional weight/bias/dsum,
# misaligned views, persistent loops): once plainly, then under memcheck (full grid) and
# racecheck, synccheck and initcheck (XPURUNTIME_NORM_CHECK_QUICK=1, a shorter grid with the
# same launch shapes). Logs go to $OUT (default ./norm-sanitize-out). Prints one line per run
# ("ERROR SUMMARY: 0 errors" from each tool) and exits non-zero if any run failed.
set -uo pipefail
OUT=${OUT:-norm-sanitize-out}
BUILD=${BUILD:-/tmp/norm-sanitize}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

# Line information for the reports; cuBLAS declarations are not needed here.
if ! { cmake -S native -B "$BUILD" -G Ninja -DXPURUNTIME_CUDA=ON -DXPURUNTIME_BUILD_TESTS=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_FLAGS=-lineinfo \
        -DXPURUNTIME_CHECK_CUBLAS_API=OFF &&
      cmake --build "$BUILD" --target test_norms -j "$(nproc)"; } >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED (see $OUT/build.log)"
  exit 1
fi
TEST="$BUILD/tests/test_norms"

failed=0
run() {  # $1: name; rest: command
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -h "ERROR SUMMARY" "$OUT/$name.log" | tail -1)
  echo "$name: rc=$rc, $((SECONDS - start)) s, ${summary:-no sanitizer summary} |$(grep -h "cases," "$OUT/$name.log" | tail -1)"
  if [ "$rc" -ne 0 ] || grep -q "^FAIL" "$OUT/$name.log"; then
    failed=1
    grep -E "^FAIL|CHECK|worst|=========" "$OUT/$name.log" | head -30
  fi
}

run plain "$TEST"
run memcheck "$SANITIZER" --tool memcheck --error-exitcode 97 "$TEST"
export XPURUNTIME_NORM_CHECK_QUICK=1
run racecheck "$SANITIZER" --tool racecheck --racecheck-report all --error-exitcode 97 "$TEST"
run synccheck "$SANITIZER" --tool synccheck --error-exitcode 97 "$TEST"
run initcheck "$SANITIZER" --tool initcheck --error-exitcode 97 "$TEST"
if [ "$failed" -ne 0 ]; then
  echo "norm kernels: SANITIZER OR CHECK FAILURES (logs in $OUT)"
  exit 1
fi
echo "norm kernels: all checks clean (logs in $OUT)"
