#!/usr/bin/env bash
# Nsight Compute profile of xrt_flash's forward next to cuDNN's (attention_profile.py), on the
# GPU machine with the core importable. The full section set per kernel; the report file and
# a text summary (speed of light, pipe utilisation, warp stall reasons, occupancy) go to $OUT.
set -uo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
SCRIPT="$(dirname "$0")/attention_profile.py"
"$NCU" --profile-from-start off --set full --import-source no -f -o "$OUT/attention_fwd" \
  python3 "$SCRIPT" >"$OUT/ncu_run.log" 2>&1 || { tail -30 "$OUT/ncu_run.log"; exit 1; }
"$NCU" --import "$OUT/attention_fwd.ncu-rep" --page details \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
  >"$OUT/attention_fwd_details.txt" 2>&1
"$NCU" --import "$OUT/attention_fwd.ncu-rep" --page raw --csv \
  --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,launch__registers_per_thread,launch__occupancy_limit_registers,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  >"$OUT/attention_fwd_metrics.csv" 2>&1
grep -E "^  [A-Za-z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy" \
  "$OUT/attention_fwd_details.txt" | head -40
