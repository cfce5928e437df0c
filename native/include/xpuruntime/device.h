// DeviceManager: what devices exist (CUDA GPUs and the CPU), which one is current, sync.
// Works in a CUDA build on a machine without a GPU or driver: it then reports zero CUDA devices.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "xpuruntime/tensor.h"

namespace xrt {

struct DeviceInfo {
  int id = 0;
  std::string name;
  DeviceKind kind = DeviceKind::CPU;
  std::size_t total_memory = 0;
  std::size_t free_memory = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  bool supports_fp16 = false;
  bool supports_bf16 = false;
  bool supports_int8 = false;
};

class DeviceManager {
 public:
  static DeviceManager& instance();

  bool cuda_built() const;          // compiled with CUDA support
  int cuda_device_count();          // 0 without GPU/driver
  std::string cuda_unavailable_reason();  // "" when CUDA devices exist
  int driver_version();             // e.g. 13000; 0 without a driver
  int runtime_version();            // cudart version compiled in; 0 in a CPU build

  DeviceInfo cuda_device(int index);  // InvalidArgumentError when out of range
  DeviceInfo cpu_device();
  std::vector<DeviceInfo> all_devices();  // CUDA devices, then the CPU

  int current_device();              // CUDA index; InvalidArgumentError if none
  void set_current_device(int index);
  void synchronize(int index);       // -1: current device
  void check_device(DeviceRef dev);  // throws with the number of devices that exist

 private:
  DeviceManager() = default;
};

}  // namespace xrt
