#include "xpuruntime/microbench.h"

#include <chrono>

#include "xpuruntime/errors.h"
#include "xpuruntime/memory.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/cuda_check.h"
#endif

namespace xrt {

namespace {
template <typename F>
double ns_per_iteration(int iterations, F body) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) body(i);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / iterations;
}
}  // namespace

double pool_alloc_free_ns(const std::vector<std::size_t>& sizes, int iterations, int device) {
  auto& pool = CachingAllocator::instance();
  for (std::size_t s : sizes) pool.free(pool.allocate(s, device, nullptr));  // warm the cache
  return ns_per_iteration(iterations, [&](int i) {
    pool.free(pool.allocate(sizes[static_cast<std::size_t>(i) % sizes.size()], device, nullptr));
  });
}

double driver_alloc_free_ns(const std::vector<std::size_t>& sizes, int iterations, int device) {
#if XPURUNTIME_WITH_CUDA
  XRT_CUDA_CHECK(cudaSetDevice(device));
  return ns_per_iteration(iterations, [&](int i) {
    void* p = nullptr;
    XRT_CUDA_CHECK(cudaMalloc(&p, sizes[static_cast<std::size_t>(i) % sizes.size()]));
    XRT_CUDA_CHECK(cudaFree(p));
  });
#else
  (void)sizes, (void)iterations, (void)device;
  throw CudaError("cudaMalloc timing needs a CUDA build of xpuruntime-core");
#endif
}

double cached_resolve_ns(const OpQuery& query, const std::string& kernel, Mode mode,
                         Strategy strategy, int iterations) {
  Dispatcher& d = Dispatcher::instance();
  d.resolve(query, kernel, mode, strategy);
  const void* sink = nullptr;
  const double ns = ns_per_iteration(iterations, [&](int) {
    sink = d.resolve(query, kernel, mode, strategy).get();
  });
  if (sink == nullptr) throw Error("resolve returned no decision");
  return ns;
}

}  // namespace xrt
