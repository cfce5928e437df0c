#include "xpuruntime/memory.h"

#include <algorithm>
#include <string>

#include "xpuruntime/errors.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/cuda_check.h"
#endif

namespace xrt {

std::size_t size_class_bytes(std::size_t bytes) {
  constexpr std::size_t kMin = 512;
  if (bytes <= kMin) return kMin;
  // Four classes per power of two: waste stays under 25% and the class count small.
  std::size_t power = kMin;
  while (power * 2 < bytes) power *= 2;
  const std::size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: the pluggable-allocator hooks may free after static destruction began.
  static auto* pool = new CachingAllocator();
  return *pool;
}

std::uint64_t CachingAllocator::free_key(int device, void* stream, std::size_t size) {
  std::uint64_t h = static_cast<std::uint64_t>(size) * 0x9E3779B97F4A7C15ULL;
  h ^= reinterpret_cast<std::uintptr_t>(stream) + 0x632BE59BD9B4E019ULL + (h << 6) + (h >> 2);
  h ^= static_cast<std::uint64_t>(device) + 0x85EBCA77C2B2AE63ULL + (h << 6) + (h >> 2);
  return h;
}

namespace {
void update_fragmentation(MemoryStats& s) {
  s.fragmentation =
      s.reserved == 0 ? 0.0 : 1.0 - static_cast<double>(s.allocated) / static_cast<double>(s.reserved);
}
}  // namespace

#if XPURUNTIME_WITH_CUDA

namespace {
std::size_t device_free_bytes(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return 0;
  std::size_t free_bytes = 0, total = 0;
  if (cudaSetDevice(device) == cudaSuccess) cudaMemGetInfo(&free_bytes, &total);
  cudaSetDevice(previous);
  cudaGetLastError();
  return free_bytes;
}
}  // namespace

void* CachingAllocator::driver_malloc(std::size_t size, int device, std::size_t requested) {
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) XRT_CUDA_CHECK(cudaSetDevice(device));
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    // Give every cached block back and try once more before reporting OOM.
    cudaGetLastError();
    cudaDeviceSynchronize();
    release_cached_locked();
    status = cudaMalloc(&ptr, size);
  }
  if (previous != device) cudaSetDevice(previous);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    const std::size_t free_bytes = device_free_bytes(device);
    throw OutOfMemoryError(
        "CUDA out of memory on cuda:" + std::to_string(device) + ": tried to allocate " +
            std::to_string(requested) + " bytes (" + std::to_string(size) +
            " with size-class rounding) but only " + std::to_string(free_bytes) +
            " bytes are free; the pool holds " + std::to_string(stats_.reserved) +
            " bytes (" + std::to_string(stats_.allocated) +
            " in use). Free tensors you no longer need, use smaller batches, or set "
            "MemoryPolicy(limit_bytes=...) lower for other users of the device.",
        requested, free_bytes);
  }
  XRT_CUDA_CHECK(status);
  ++stats_.driver_allocations;
  stats_.reserved += size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  return ptr;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [key, blocks] : free_blocks_) {
    for (const Block& b : blocks) {
      int previous = 0;
      cudaGetDevice(&previous);
      cudaSetDevice(b.device);
      cudaFree(b.ptr);
      cudaSetDevice(previous);
      ++stats_.driver_frees;
      stats_.reserved -= b.size;
      stats_.cached -= b.size;
      --stats_.cached_blocks;
    }
  }
  free_blocks_.clear();
  cudaGetLastError();
}

void* CachingAllocator::allocate(std::size_t bytes, int device, void* stream) {
  const std::size_t size = size_class_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto it = free_blocks_.find(free_key(device, stream, size));
  // Keys are hashes: check the block really belongs to this device, stream and size.
  if (it != free_blocks_.end()) {
    auto& list = it->second;
    for (std::size_t i = list.size(); i-- > 0;) {
      const Block& b = list[i];
      if (b.device == device && b.stream == stream && b.size == size) {
        ptr = b.ptr;
        list[i] = list.back();
        list.pop_back();
        stats_.cached -= size;
        --stats_.cached_blocks;
        ++stats_.cache_hits;
        break;
      }
    }
  }
  if (ptr == nullptr) ptr = driver_malloc(size, device, bytes);
  live_.emplace(ptr, Block{ptr, size, bytes, device, stream});
  ++stats_.allocations;
  ++stats_.live_blocks;
  stats_.allocated += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw InvalidArgumentError("pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                               " was not allocated by the xpuruntime pool (double free?)");
  }
  const Block block = it->second;
  live_.erase(it);
  stats_.allocated -= block.requested;
  --stats_.live_blocks;
  auto capture = capturing_.find(block.stream);
  if (capture != capturing_.end()) {
    // A captured graph may still read or write this block on replay.
    graph_held_[capture->second].push_back(block);
    return;
  }
  free_blocks_[free_key(block.device, block.stream, block.size)].push_back(block);
  stats_.cached += block.size;
  ++stats_.cached_blocks;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Blocks reused only on their own stream may still be in use by queued work there.
  if (!free_blocks_.empty()) cudaDeviceSynchronize();
  release_cached_locked();
  for (auto& [size, ptrs] : pinned_free_) {
    for (void* p : ptrs) {
      cudaFreeHost(p);
      stats_.pinned_reserved -= size;
    }
  }
  pinned_free_.clear();
  cudaGetLastError();
}

void* CachingAllocator::allocate_pinned(std::size_t bytes) {
  const std::size_t size = size_class_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto& list = pinned_free_[size];
  if (!list.empty()) {
    ptr = list.back();
    list.pop_back();
  } else {
    const cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemoryError("could not page-lock " + std::to_string(bytes) +
                                 " bytes of host memory; free pinned buffers or use pageable "
                                 "memory",
                             bytes, 0);
    }
    XRT_CUDA_CHECK(status);
    stats_.pinned_reserved += size;
  }
  pinned_live_.emplace(ptr, size);
  stats_.pinned_allocated += size;
  return ptr;
}

void CachingAllocator::free_pinned(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pinned_live_.find(ptr);
  if (it == pinned_live_.end()) {
    throw InvalidArgumentError("pointer was not allocated as a pinned xpuruntime buffer");
  }
  stats_.pinned_allocated -= it->second;
  pinned_free_[it->second].push_back(ptr);
  pinned_live_.erase(it);
}

void CachingAllocator::release_graph_blocks(const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_held_.find(owner);
  if (it == graph_held_.end()) return;
  for (const Block& b : it->second) {
    free_blocks_[free_key(b.device, b.stream, b.size)].push_back(b);
    stats_.cached += b.size;
    ++stats_.cached_blocks;
  }
  graph_held_.erase(it);
}

#else  // CPU-only build: there is no device to allocate on.

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw CudaError(std::string(what) +
                  " needs CUDA, but xpuruntime-core was built without it (XPURUNTIME_CUDA=OFF "
                  "or no nvcc at build time). Install a CUDA build of xpuruntime-core.");
}
}  // namespace

void* CachingAllocator::driver_malloc(std::size_t, int, std::size_t) { no_cuda("device memory"); }
void CachingAllocator::release_cached_locked() {}
void* CachingAllocator::allocate(std::size_t, int, void*) { no_cuda("device memory"); }
void CachingAllocator::free(void* ptr) {
  if (ptr != nullptr) {
    throw InvalidArgumentError("pointer was not allocated by the xpuruntime pool");
  }
}
void CachingAllocator::empty_cache() {}
void* CachingAllocator::allocate_pinned(std::size_t) { no_cuda("pinned host memory"); }
void CachingAllocator::free_pinned(void*) {
  throw InvalidArgumentError("pointer was not allocated as a pinned xpuruntime buffer");
}
void CachingAllocator::release_graph_blocks(const void*) {}

#endif

void CachingAllocator::begin_capture(void* stream, const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_[stream] = owner;
}

void CachingAllocator::end_capture(void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_.erase(stream);
}

MemoryStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats s = stats_;
  update_fragmentation(s);
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace xrt

// C ABI for torch.cuda.memory.CUDAPluggableAllocator(path, "xrt_pluggable_malloc",
// "xrt_pluggable_free"). Exceptions must not cross into PyTorch: a failed allocation returns
// nullptr, which PyTorch reports as out of memory.
extern "C" {

__attribute__((visibility("default"))) void* xrt_pluggable_malloc(std::size_t size, int device,
                                                                   void* stream) {
  try {
    return xrt::CachingAllocator::instance().allocate(size, device, stream);
  } catch (...) {
    return nullptr;
  }
}

__attribute__((visibility("default"))) void xrt_pluggable_free(void* ptr, std::size_t, int,
                                                                void*) {
  try {
    xrt::CachingAllocator::instance().free(ptr);
  } catch (...) {  // an unknown pointer is PyTorch's bug to report, not a reason to abort
  }
}

}  // extern "C"
