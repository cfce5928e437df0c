#!/usr/bin/env bash
# GPU phase: xrt_flash_fp8 (float8 e4m3 forward). compute-sanitizer memcheck and racecheck
# over tiny calls (every tile candidate and Gluon variant, GQA/MQA, packed sequences with an
# empty one, e4m3 inputs), the benchmark against our fastest bf16 forward, cuDNN and
# SDPA-flash (every fp8 tile candidate and Gluon variant timed too; cuDNN's own fp8 forward
# too where nvidia-cudnn-frontend is installed: carry its cp312 wheel in .device/wheels),
# and an Nsight Compute profile of the fp8 forwards beside our bf16 forward and cuDNN's.
# FP8_PARTS picks some of "sanitize bench profile" (default: all); FP8_BENCH_ARGS adds flags.
set -uo pipefail
LOGS=${1:-.}
mkdir -p "$LOGS"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
SCRIPT=benchmarks/attention_fp8_bench.py
status=0
for part in ${FP8_PARTS:-sanitize bench profile}; do
  case $part in
    sanitize)
      # Compile once outside the sanitizer; the caching allocator would hide overruns.
      python3 "$SCRIPT" --sanitize-calls >"$LOGS/fp8_sanitize_warmup.log" 2>&1 ||
        { tail -20 "$LOGS/fp8_sanitize_warmup.log"; status=1; continue; }
      for tool in memcheck racecheck; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --print-limit 20 \
          python3 "$SCRIPT" --sanitize-calls >"$LOGS/fp8_sanitize_$tool.log" 2>&1
        rc=$?
        echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/fp8_sanitize_$tool.log" | tail -1)"
        [ $rc -eq 0 ] || status=1
      done
      # racecheck's reports: the Gluon kernels' warp-specialisation hand-off, or new.
      python3 packages/xpuruntime-core/scripts/racecheck_triage.py \
        "$LOGS/fp8_sanitize_racecheck.log" || status=1 ;;
    bench)
      # shellcheck disable=SC2086
      python3 "$SCRIPT" --out "$LOGS" ${FP8_BENCH_ARGS:-} 2>&1 | tee "$LOGS/fp8_bench.log" || status=1 ;;
    profile)
      # The Gluon and Triton fp8 forwards, our bf16 forward and cuDNN's (the sections, pipes
      # and shared-memory figures attention_profile.sh queries; its report stays in LOGS).
      OUT="$LOGS" SCRIPT=$SCRIPT REPORT=fp8_fwd \
        bash packages/xpuruntime-core/scripts/attention_profile.sh --profile-calls || status=1 ;;
    *) echo "attention_fp8: unknown part $part"; status=1 ;;
  esac
done
exit $status
