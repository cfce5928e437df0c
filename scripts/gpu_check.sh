#!/usr/bin/env bash
# One call on the GPU machine (the device tool, repository root): install what is missing,
# build the CUDA core, then run the phases named on the command line (default: all), each
# with its own log. Logs and JSON results go to $OUT/logs and are packed into
# $OUT/gpu-logs.tar.gz (the device tool returns at most 8 files); a summary prints last.
#
#   bash scripts/gpu_check.sh setup build core_tests torch_tests inference_tests
#   bash scripts/gpu_check.sh bench_gemm bench_norms bench_attention sanitize
#
# Phases: setup (install what is carried), build (the CUDA core into /tmp/site), and every
# scripts/gpu_phases/NAME.sh (each gets the log folder as $1). A later call on the same warm
# machine may skip setup and build: /tmp/site stays. Phase selections: CORE_TESTS and
# TORCH_TESTS (pytest arguments), SANITIZE_PARTS (gemm norms attention), GRID_ARGS,
# EPILOGUE_ARGS, ATTENTION_ARGS, SDPA_ARGS (benchmark flags), PHASE_LIMIT_S (seconds each).
#
# Carried inputs (all optional, git-ignored): .device/wheels/*.whl (cp312 wheels of small
# packages the machine lacks and the pure-Python members built here), .device/models/
# (public ONNX models from scripts/fetch_public_models.py), /tmp/parts/onnxruntime_gpu.*
# (onnxruntime-gpu sent in parts by earlier calls, see ../shared/tools/wheel-parts).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
LOGS=$OUT/logs
mkdir -p "$LOGS"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
# NVLink multicast stays off on these machines, for us and for every child process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SITE=/tmp/site  # exported: phases run in child shells
export PYTHONPATH=$SITE
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

phase() {  # phase NAME TIMEOUT_S COMMAND...: run with a time limit, log, note the outcome
  local name=$1 limit=$2; shift 2
  local start=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  note "$(printf '%-28s rc=%-3s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - start ))" "$(tail -1 "$LOGS/$name.log" | cut -c1-120)")"
  return $rc
}

setup() {
  mkdir -p "$SITE"
  # A machine may come back with another session's xpuruntime in its base environment: it
  # would shadow parts of /tmp/site, so it goes (below).
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$SUMMARY"
  local ort
  ort=$(ls /tmp/parts/onnxruntime_gpu.* 2>/dev/null | head -1)
  if [ -n "$ort" ]; then
    local wheel=/tmp/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
    cat /tmp/parts/onnxruntime_gpu.* >"$wheel" &&
      python3 -m pip uninstall -q -y onnxruntime >/dev/null 2>&1
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel" &&
      note "onnxruntime-gpu installed from parts"
  fi
  # Third-party wheels now; the members go in with the core (build): one pip --target call
  # per top-level folder, as a later call replaces the folder an earlier one made.
  local others
  others=$(ls .device/wheels/*.whl 2>/dev/null | grep -v '/xpuruntime')
  if [ -n "$others" ]; then
    # shellcheck disable=SC2086
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
      $others && note "carried wheels: $(echo "$others" | wc -l)"
  fi
  rm -rf /opt/torch/.venv/lib/python3.12/site-packages/xpuruntime*
}

where() {  # which copy of each package this run imports
  python3 -c "import xpuruntime.runtime, xpuruntime.ops, xpuruntime.inference, onnxruntime as o; \
print('imports:', xpuruntime.runtime.__file__, xpuruntime.inference.__file__, o.__version__, \
o.get_available_providers())"
}

build_core() {
  local inc
  inc=$(python3 - <<'PY'
import glob, site
hits = [p for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/include/cublasLt.h")]
hits += glob.glob("/usr/local/cuda/include/cublasLt.h")
print(hits[0].rsplit("/", 1)[0] if hits else "")
PY
)
  # Only this machine's architecture (sm_90): half the device-code compile time.
  rm -rf /tmp/core-wheel
  SKBUILD_CMAKE_DEFINE="XPURUNTIME_CUDA=ON;XPURUNTIME_CUDA_ARCHITECTURES=90-real;XPURUNTIME_CUBLAS_INCLUDE_DIR=$inc;XPURUNTIME_CHECK_CUBLAS_API=ON" \
    CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip wheel -v --no-build-isolation --no-deps \
    -w /tmp/core-wheel ./packages/xpuruntime-core || return 1
  rm -rf "$SITE"/xpuruntime "$SITE"/xpuruntime*.dist-info
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    /tmp/core-wheel/*.whl .device/wheels/xpuruntime*.whl
}

pytest_gpu() {  # the members' suites, GPU tests included
  python3 -m pytest -p no:cacheprovider -q -rs -x --timeout 300 "$@"
}

pack() {
  tar -C "$OUT" -czf "$OUT/gpu-logs.tar.gz" logs
  echo "== summary"; cat "$SUMMARY"
}
trap pack EXIT

PHASES=${*:-setup build core_tests torch_tests inference_tests}
for p in $PHASES; do
  case $p in
    setup) setup ;;
    build) export -f build_core; phase build-core 400 bash -c build_core || exit 1; where | tee -a "$SUMMARY" ;;
    *)
      if [ -f "scripts/gpu_phases/$p.sh" ]; then
        phase "$p" "${PHASE_LIMIT_S:-420}" bash "scripts/gpu_phases/$p.sh" "$LOGS"
      else
        note "$p: no such phase"
      fi
      ;;
  esac
done
