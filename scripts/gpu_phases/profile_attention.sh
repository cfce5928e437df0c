#!/usr/bin/env bash
# GPU phase: Nsight Compute profile of xrt_flash's forward next to cuDNN's (one case each).
set -uo pipefail
OUT=${1:-.} bash packages/xpuruntime-core/scripts/attention_profile.sh
