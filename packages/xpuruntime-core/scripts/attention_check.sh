#!/usr/bin/env bash
# xrt_flash on a GPU machine: GPU tests, compute-sanitizer, benchmark. Run from the repo root:
#   bash packages/xpuruntime-core/scripts/attention_check.sh tests      # ~4-5 min: build, GPU tests, sanitizer
#   bash packages/xpuruntime-core/scripts/attention_check.sh bench      # ~3-4 min (bench --quick: ~1)
# Logs and JSON go to $OUT (default ./device-out). The core is built CPU-only into /tmp/site
# unless it is already importable there (xrt_flash needs only the dispatcher from the native
# core; its kernels are Triton). Wheels of missing Python packages (msgspec, tomli-w) are
# taken from .whl-core/ if present, as device_check.sh does.
set -uo pipefail
STEP=${1:-tests}
shift || true
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SITE=/tmp/site
if ls .whl-core/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl-core/*.whl
fi
export PYTHONPATH=$SITE:$PWD/packages/xpuruntime-policies/src:$PWD/packages/xpuruntime-torch/src
if ! python3 -c "import xpuruntime.runtime._core, xpuruntime.kernels" 2>/dev/null; then
  START=$(date +%s)
  XPURUNTIME_CUDA=OFF python3 -m pip install --no-build-isolation --no-deps \
    --target "$SITE" --upgrade ./packages/xpuruntime-core >"$OUT/attention_build.log" 2>&1 ||
    { tail -40 "$OUT/attention_build.log"; exit 1; }
  echo "core build (CPU-only): $(( $(date +%s) - START )) s"
fi
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

case "$STEP" in
  tests)
    START=$(date +%s)
    python3 -m pytest packages/xpuruntime-core/tests/test_attention_gpu.py \
      packages/xpuruntime-torch/tests/test_xrt_attention_gpu.py \
      -p no:cacheprovider -q -rs -s >"$OUT/attention_tests.log" 2>&1
    echo "GPU tests rc=$? ($(( $(date +%s) - START )) s)"
    grep -E "passed|failed|error|candidates that did not compile" "$OUT/attention_tests.log" | tail -8
    START=$(date +%s)
    bash packages/xpuruntime-core/scripts/attention_sanitize.sh
    echo "sanitizer rc=$? ($(( $(date +%s) - START )) s)"
    ;;
  bench)
    python3 benchmarks/attention_bench.py --out "$OUT" "$@" 2>&1 | tee "$OUT/attention_bench.log"
    ;;
  *)
    echo "usage: attention_check.sh tests|bench [benchmark options]" >&2
    exit 2
    ;;
esac
