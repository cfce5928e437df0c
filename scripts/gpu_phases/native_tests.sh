#!/usr/bin/env bash
# GPU phase: native/ built with CUDA (cuBLAS declarations checked against the real headers)
# and its C++ tests, the CUDA ones included.
set -uo pipefail
cmake -S native -B /tmp/native-gpu-tests -G Ninja -DXPURUNTIME_CUDA=ON \
  -DXPURUNTIME_CUDA_ARCHITECTURES=90-real -DXPURUNTIME_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release &&
  cmake --build /tmp/native-gpu-tests -j "$(nproc)" &&
  ctest --test-dir /tmp/native-gpu-tests --output-on-failure
