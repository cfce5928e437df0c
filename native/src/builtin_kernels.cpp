#include "builtin_kernels.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "xpuruntime/errors.h"

namespace xrt {

namespace {
#if !XPURUNTIME_WITH_CUDA
// The CUDA kernels exist in a CPU build too, so a policy naming them is valid everywhere and
// a pin says why it cannot run instead of "unknown kernel".
KernelDef without_cuda(const char* op, const char* name, const char* library) {
  KernelDef def;
  def.op = op;
  def.name = name;
  def.library = library;
  def.unsupported_reason = [](const OpQuery&) {
    return std::string("xpuruntime-core was built without CUDA (XPURUNTIME_CUDA=OFF or no "
                       "nvcc at build time)");
  };
  def.run = [](const KernelCall&) -> std::string {
    throw UnsupportedOperationError("xpuruntime-core was built without CUDA");
  };
  return def;
}
#endif
}  // namespace

#if !XPURUNTIME_WITH_CUDA
std::vector<KernelDef> cuda_matmul_kernels() {
  return {without_cuda("matmul", "cublasLt", "cuBLASLt"), without_cuda("matmul", "cublas", "cuBLAS")};
}
KernelDef cuda_linear_kernel() { return without_cuda("linear", "cublasLt", "cuBLASLt"); }
#endif

void register_builtin_kernels(KernelRegistry& registry) {
  for (auto& def : cuda_matmul_kernels()) registry.add(std::move(def));
  registry.add(cpu_matmul_kernel());
  registry.add(cuda_linear_kernel());
  registry.add(cpu_linear_kernel());
  registry.add(xrt_layernorm_kernel());
  registry.add(cpu_layernorm_kernel());
}

double median_host_ms(int repeats, const std::function<void()>& body) {
  body();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace xrt
