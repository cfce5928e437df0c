#include "xpuruntime/fingerprint.h"

#include "xpuruntime/device.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/blas_loader.h"
#endif

namespace xrt {

NativeEnvironment native_environment() {
  NativeEnvironment env;
  DeviceManager& dm = DeviceManager::instance();
  env.cuda_built = dm.cuda_built();
  env.cuda_runtime_version = dm.runtime_version();
  env.cuda_driver_version = dm.driver_version();
  for (int i = 0; i < dm.cuda_device_count(); ++i) {
    const DeviceInfo d = dm.cuda_device(i);
    env.gpus.push_back({d.name, d.cc_major, d.cc_minor, d.sm_count, d.total_memory});
  }
#if defined(__clang__)
  env.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  env.compiler = "gcc " __VERSION__;
#endif
#if XPURUNTIME_WITH_CUDA
  env.cuda_architectures = XPURUNTIME_CUDA_ARCHITECTURES;
  const BlasLibraries& blas = BlasLibraries::probe();
  env.cublas_version = blas.cublas_version;
  env.cublaslt_version = blas.cublaslt_version;
  env.cublas_path = blas.cublas_path;
  env.cublaslt_path = blas.cublaslt_path;
  env.cudnn_version = blas.cudnn_version;
#endif
  return env;
}

}  // namespace xrt
