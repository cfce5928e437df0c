#!/usr/bin/env bash
# cibuildwheel's before-all for xpuruntime-core in a manylinux_2_28 (AlmaLinux 8) image.
# With XPURUNTIME_CUDA=ON it installs what the CUDA build needs from NVIDIA's RHEL 8
# repository: nvcc, the CUDA runtime (linked statically), NVTX and cuBLAS headers (cuBLAS
# itself is opened at run time). Without it, nothing is installed and the core builds CPU-only.
set -euo pipefail
if [[ "${XPURUNTIME_CUDA:-AUTO}" != "ON" ]]; then
  echo "XPURUNTIME_CUDA=${XPURUNTIME_CUDA:-AUTO}: building the CPU-only core"
  exit 0
fi
version="${XPURUNTIME_CUDA_VERSION:-13-0}"  # dnf package suffix: 13-0 is CUDA 13.0
dnf install -y dnf-plugins-core
dnf config-manager --add-repo \
  https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
dnf install -y "cuda-nvcc-${version}" "cuda-cudart-devel-${version}" \
  "cuda-nvtx-${version}" "libcublas-devel-${version}"
ln -sfn "/usr/local/cuda-${version/-/.}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
