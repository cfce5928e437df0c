#!/usr/bin/env bash
# Nsight Compute profile of xrt_flash's forward next to cuDNN's (attention_profile.py), on the
# GPU machine with the core importable. The full section set per kernel; the report file and
# a text summary (speed of light, pipe utilisation, warp stall reasons, occupancy) go to $OUT.
#   attention_profile.sh                                  # forwards: $OUT/attention_fwd.*
#   REPORT=attention_fwd_hd64c attention_profile.sh --causal --head-dim 64 --seqlen 2048
#   REPORT=attention_bwd attention_profile.sh --backward --causal [--variants ...]
#   SCRIPT=benchmarks/attention_fp8_bench.py REPORT=attention_fp8 attention_profile.sh --profile-calls
#   SASS_SOURCE=1 attention_profile.sh ...   # also $OUT/${REPORT}_sass_<launch>.csv per launch
set -uo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
SCRIPT=${SCRIPT:-"$(dirname "$0")/attention_profile.py"}
REPORT=${REPORT:-attention_fwd}
"$NCU" --profile-from-start off --set full --import-source no -f -o "$OUT/$REPORT" \
  python3 "$SCRIPT" "$@" >"$OUT/${REPORT}_run.log" 2>&1 || { tail -30 "$OUT/${REPORT}_run.log"; exit 1; }
"$NCU" --import "$OUT/$REPORT.ncu-rep" --page details \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
  >"$OUT/${REPORT}_details.txt" 2>&1
"$NCU" --import "$OUT/$REPORT.ncu-rep" --page raw --csv \
  --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,launch__registers_per_thread,launch__occupancy_limit_registers,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  >"$OUT/${REPORT}_metrics.csv" 2>&1
# Shared memory and the remaining stall reasons, queried apart: a name this ncu lacks only
# costs this file.
"$NCU" --import "$OUT/$REPORT.ncu-rep" --page raw --csv \
  --metrics gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__issue_active.avg.pct_of_peak_sustained_active \
  >"$OUT/${REPORT}_smem.csv" 2>&1
# The other pipes: the special-function unit (exponentials, conversions), FMA and ALU, for
# kernels whose softmax may bound them (fp8).
"$NCU" --import "$OUT/$REPORT.ncu-rep" --page raw --csv \
  --metrics gpu__time_duration.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active \
  >"$OUT/${REPORT}_pipes.csv" 2>&1
# SASS_SOURCE=1: each profiled launch's SASS with its warp-state samples per instruction
# (${REPORT}_sass_<launch>.csv), for ncu_loop_stalls.py.
if [ "${SASS_SOURCE:-0}" = 1 ]; then
  for launch in 0 1 2 3 4 5 6 7; do
    "$NCU" --import "$OUT/$REPORT.ncu-rep" --page source --csv --print-source sass \
      --launch-skip "$launch" --launch-count 1 >"$OUT/${REPORT}_sass_$launch.csv" 2>/dev/null &&
      grep -q '^"Address"' "$OUT/${REPORT}_sass_$launch.csv" ||
      { rm -f "$OUT/${REPORT}_sass_$launch.csv"; break; }
  done
fi
grep -E "^  [A-Za-z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy" \
  "$OUT/${REPORT}_details.txt" | head -40
