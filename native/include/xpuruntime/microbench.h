// Timing loops run entirely in C++ (no Python between iterations), for the benchmarks and
// the C++ tests: each returns nanoseconds per iteration.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "xpuruntime/dispatcher.h"

namespace xrt {

// One pool allocate + free of each size in `sizes`, cycled, `iterations` times.
double pool_alloc_free_ns(const std::vector<std::size_t>& sizes, int iterations, int device);
// The same with cudaMalloc + cudaFree (CudaError in a CPU build).
double driver_alloc_free_ns(const std::vector<std::size_t>& sizes, int iterations, int device);
// One cached Dispatcher::resolve of the same query (resolved once before timing).
double cached_resolve_ns(const OpQuery& query, const std::string& kernel, Mode mode,
                         Strategy strategy, int iterations);

}  // namespace xrt
