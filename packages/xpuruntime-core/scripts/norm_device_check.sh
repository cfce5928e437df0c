#!/usr/bin/env bash
# Everything about the norm kernels on a GPU machine, in one command from the repository root:
#   bash packages/xpuruntime-core/scripts/norm_device_check.sh
# 1. builds the core with CUDA into $SITE (as device_check.sh does);
# 2. runs the norm tests on the GPU: the core's (test_gpu.py -k norm) and the PyTorch
#    extension's (test_norms_gpu.py, and test_norms.py with CUDA PyTorch present);
# 3. runs benchmarks/norms_bench.py (table on stdout, norms_bench.json in $OUT);
# 4. runs norm_sanitize.sh (C++ CUDA-vs-CPU checks plainly and under compute-sanitizer).
# Logs go to $OUT (default ./norm-device-out). Wheels of missing Python packages (msgspec,
# tomli-w, click, ...) are taken from .whl-core/ if present.
set -uo pipefail
OUT=${OUT:-norm-device-out}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
if ls .whl-core/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl-core/*.whl
fi
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/build.log"
START=$SECONDS
if ! SKBUILD_CMAKE_DEFINE="XPURUNTIME_CUDA=ON;XPURUNTIME_CHECK_CUBLAS_API=OFF" \
    python3 -m pip install -v --no-build-isolation --no-deps --target "$SITE" --upgrade \
    ./packages/xpuruntime-core >>"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "CORE BUILD FAILED (see $OUT/build.log)"
  exit 1
fi
echo "core build: $((SECONDS - START)) s"
export PYTHONPATH=$SITE:$PWD/packages/xpuruntime/src:$PWD/packages/xpuruntime-policies/src:$PWD/packages/xpuruntime-torch/src

status=0
python3 -m pytest -p no:cacheprovider -q -rs packages/xpuruntime-core/tests/test_gpu.py -k norm \
  packages/xpuruntime-core/tests/test_norms_cpu.py >"$OUT/pytest_core.log" 2>&1 || status=1
echo "core norm tests: $(tail -1 "$OUT/pytest_core.log")"
python3 -m pytest -p no:cacheprovider -q -rs packages/xpuruntime-torch/tests/test_norms_gpu.py \
  packages/xpuruntime-torch/tests/test_norms.py >"$OUT/pytest_torch.log" 2>&1 || status=1
echo "torch norm tests: $(tail -1 "$OUT/pytest_torch.log")"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_core.log" "$OUT/pytest_torch.log" | head -30

python3 benchmarks/norms_bench.py --out "$OUT" 2>&1 | tee "$OUT/norms_bench.log" || status=1

OUT="$OUT/sanitizer" bash packages/xpuruntime-core/scripts/norm_sanitize.sh || status=1
exit $status
