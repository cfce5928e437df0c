// The native half of the environment fingerprint: what the CUDA stack reports. The Python
// half adds interpreter and package versions and hashes the whole.
#pragma once

#include <string>
#include <vector>

namespace xrt {

struct GpuFingerprint {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::size_t total_memory = 0;
};

struct NativeEnvironment {
  bool cuda_built = false;
  int cuda_runtime_version = 0;  // 0: CPU build
  int cuda_driver_version = 0;   // 0: no driver
  std::vector<GpuFingerprint> gpus;
  int cublas_version = 0;        // 0: library not found
  std::size_t cublaslt_version = 0;
  std::size_t cudnn_version = 0;
  std::string cublas_path;
  std::string cublaslt_path;
  std::string compiler;
  std::string cuda_architectures;
};

NativeEnvironment native_environment();

}  // namespace xrt
