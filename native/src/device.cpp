#include "xpuruntime/device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <thread>

#include "xpuruntime/errors.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/cuda_check.h"
#endif

namespace xrt {

DeviceManager& DeviceManager::instance() {
  static DeviceManager manager;
  return manager;
}

bool DeviceManager::cuda_built() const { return XPURUNTIME_WITH_CUDA != 0; }

#if XPURUNTIME_WITH_CUDA

namespace {
// Probed once: cudaGetDeviceCount fails cleanly (no driver, no device) and that must read
// as "zero CUDA devices", not as an error.
struct CudaProbe {
  int count = 0;
  std::string reason;
};
const CudaProbe& probe() {
  static const CudaProbe result = [] {
    CudaProbe p;
    const cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      p.count = 0;
      p.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + " (" +
                 cudaGetErrorString(status) + ")";
      // cudart says "insufficient driver" also when there is no driver at all.
      if (status == cudaErrorInsufficientDriver) {
        void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (driver == nullptr) {
          p.reason = "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
        } else {
          dlclose(driver);
        }
      }
    } else if (p.count == 0) {
      p.reason = "the CUDA driver reports no devices";
    }
    return p;
  }();
  return result;
}
}  // namespace

int DeviceManager::cuda_device_count() { return probe().count; }
std::string DeviceManager::cuda_unavailable_reason() { return probe().reason; }

int DeviceManager::driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

int DeviceManager::runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return CUDART_VERSION;
  }
  return v;
}

DeviceInfo DeviceManager::cuda_device(int index) {
  check_device({DeviceKind::CUDA, index});
  cudaDeviceProp prop{};
  XRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo d;
  d.id = index;
  d.name = prop.name;
  d.kind = DeviceKind::CUDA;
  d.total_memory = prop.totalGlobalMem;
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  XRT_CUDA_CHECK(cudaSetDevice(index));
  std::size_t free_bytes = 0, total = 0;
  const cudaError_t mem = cudaMemGetInfo(&free_bytes, &total);
  cudaSetDevice(previous);
  XRT_CUDA_CHECK(mem);
  d.free_memory = free_bytes;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  const int cc = prop.major * 10 + prop.minor;
  d.supports_fp16 = cc >= 53;
  d.supports_bf16 = cc >= 80;
  d.supports_int8 = cc >= 61;  // dp4a
  return d;
}

int DeviceManager::current_device() {
  if (cuda_device_count() == 0) {
    throw InvalidArgumentError("no CUDA device is available (" + cuda_unavailable_reason() +
                               "); use device 'cpu'");
  }
  int d = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void DeviceManager::set_current_device(int index) {
  check_device({DeviceKind::CUDA, index});
  XRT_CUDA_CHECK(cudaSetDevice(index));
}

void DeviceManager::synchronize(int index) {
  if (cuda_device_count() == 0) return;  // nothing can be pending
  if (index < 0) {
    XRT_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  check_device({DeviceKind::CUDA, index});
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  XRT_CUDA_CHECK(cudaSetDevice(index));
  const cudaError_t status = cudaDeviceSynchronize();
  cudaSetDevice(previous);
  XRT_CUDA_CHECK(status);
}

#else  // CPU-only build

int DeviceManager::cuda_device_count() { return 0; }
std::string DeviceManager::cuda_unavailable_reason() {
  return "xpuruntime-core was built without CUDA (XPURUNTIME_CUDA=OFF or no nvcc at build time)";
}
int DeviceManager::driver_version() { return 0; }
int DeviceManager::runtime_version() { return 0; }
DeviceInfo DeviceManager::cuda_device(int index) {
  check_device({DeviceKind::CUDA, index});
  return {};
}
int DeviceManager::current_device() {
  throw InvalidArgumentError("no CUDA device is available (" + cuda_unavailable_reason() +
                             "); use device 'cpu'");
}
void DeviceManager::set_current_device(int index) { check_device({DeviceKind::CUDA, index}); }
void DeviceManager::synchronize(int) {}

#endif

void DeviceManager::check_device(DeviceRef dev) {
  if (dev.kind == DeviceKind::CPU) {
    if (dev.index != 0) {
      throw InvalidArgumentError("CPU device index " + std::to_string(dev.index) +
                                 " is out of range; there is one CPU device, index 0");
    }
    return;
  }
  const int count = cuda_device_count();
  if (dev.index < 0 || dev.index >= count) {
    std::string msg = "CUDA device index " + std::to_string(dev.index) + " is out of range: ";
    if (count == 0) {
      msg += "no CUDA device exists (" + cuda_unavailable_reason() + "); use device 'cpu'";
    } else {
      msg += std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
             " exist (valid indices 0.." + std::to_string(count - 1) + ")";
    }
    throw InvalidArgumentError(msg);
  }
}

DeviceInfo DeviceManager::cpu_device() {
  DeviceInfo d;
  d.id = 0;
  d.name = "cpu";
  d.kind = DeviceKind::CPU;
  d.sm_count = static_cast<int>(std::thread::hardware_concurrency());  // logical cores
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  d.total_memory = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * page;
  d.free_memory = static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  d.supports_fp16 = false;  // the CPU reference kernels compute in fp32/fp64
  d.supports_bf16 = false;
  d.supports_int8 = false;
  return d;
}

std::vector<DeviceInfo> DeviceManager::all_devices() {
  std::vector<DeviceInfo> out;
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) out.push_back(cuda_device(i));
  out.push_back(cpu_device());
  return out;
}

}  // namespace xrt
