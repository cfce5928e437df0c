#include "xpuruntime/memory.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <string>

#include "xpuruntime/checked.h"
#include "xpuruntime/errors.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/cuda_check.h"
#endif

namespace xrt {

using namespace pool_sizes;

void check_request_bytes(std::size_t bytes, const char* what) {
  // Rounding a request up to its size class must not wrap around.
  if (bytes > static_cast<std::size_t>(kMaxBytes)) {
    throw InvalidArgumentError(std::string(what) + " of " + std::to_string(bytes) +
                               " bytes exceeds the 2^62-byte limit");
  }
}

std::size_t size_class_bytes(std::size_t bytes) {
  check_request_bytes(bytes, "pool allocation");
  if (bytes <= kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::size_t segment_bytes(std::size_t block_bytes) {
  if (block_bytes <= kSmallRequest) return kSmallSegment;
  if (block_bytes < kOwnSegment) return kMidSegment;
  return (block_bytes + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
}

// ---- BlockArena: best fit, splitting, coalescing -------------------------------------------

bool BlockArena::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->device != b->device) return a->device < b->device;
  if (a->stream != b->stream) return std::less<void*>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

namespace {
bool worth_splitting(const BlockArena::Block& block, std::size_t size) {
  const std::size_t rest = block.size - size;
  // A large-pool remainder of 1 MiB or less could only serve requests that belong to the
  // small pool, so it stays with the block (as in PyTorch) instead of fragmenting the segment.
  return block.small ? rest >= kMinBlock : rest > kSmallRequest;
}
}  // namespace

BlockArena::Block* BlockArena::new_block() {
  if (spare_.empty()) return &storage_.emplace_back();
  Block* block = spare_.back();
  spare_.pop_back();
  block->prev = block->next = nullptr;
  block->requested = 0;
  block->is_free = false;
  return block;  // keeps its free-set node, if it has one, for the next insert
}

void BlockArena::retire(Block* block) { spare_.push_back(block); }

void BlockArena::insert_free(Block* block) {
  block->is_free = true;
  free_bytes_ += block->size;
  ++free_blocks_;
  FreeSet& set = free_set(block->small);
  // The node of a Block only ever holds that Block's own address, so it can be re-inserted.
  block->where = block->node ? set.insert(std::move(block->node)).position
                             : set.insert(block).first;
}

void BlockArena::erase_free(Block* block) {
  block->node = free_set(block->small).extract(block->where);
  block->is_free = false;
  free_bytes_ -= block->size;
  --free_blocks_;
}

BlockArena::Block* BlockArena::split(Block* block, std::size_t size) {
  if (!worth_splitting(*block, size)) return block;
  Block* rest = new_block();
  rest->addr = block->addr + size;
  rest->size = block->size - size;
  rest->device = block->device;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  insert_free(rest);
  return block;
}

BlockArena::Block* BlockArena::take_cached(std::size_t size, int device, void* stream) {
  FreeSet& set = free_set(size <= kSmallRequest);
  Block probe;
  probe.device = device;
  probe.stream = stream;
  probe.size = size;
  auto it = set.lower_bound(&probe);  // smallest block >= size on this device and stream
  if (it == set.end() || (*it)->device != device || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  block->node = set.extract(it);
  block->is_free = false;
  free_bytes_ -= block->size;
  --free_blocks_;
  return split(block, size);
}

BlockArena::Block* BlockArena::take_from_new_segment(void* base, std::size_t segment_size,
                                                     std::size_t size, int device,
                                                     void* stream) {
  if (segment_size < size) {
    throw InvalidArgumentError("segment of " + std::to_string(segment_size) +
                               " bytes cannot hold a block of " + std::to_string(size));
  }
  Block* block = new_block();
  block->addr = reinterpret_cast<std::uintptr_t>(base);
  block->size = segment_size;
  block->device = device;
  block->stream = stream;
  block->small = size <= kSmallRequest;
  ++segments_;
  return split(block, size);
}

void BlockArena::give_back(Block* block) {
  block->requested = 0;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free) {
    erase_free(prev);
    block->addr = prev->addr;
    block->size += prev->size;
    block->prev = prev->prev;
    if (block->prev != nullptr) block->prev->next = block;
    retire(prev);
  }
  if (Block* next = block->next; next != nullptr && next->is_free) {
    erase_free(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    retire(next);
  }
  insert_free(block);
}

std::vector<BlockArena::Segment> BlockArena::drop_free_segments() {
  std::vector<Segment> dropped;
  for (FreeSet* set : {&small_free_, &large_free_}) {
    for (auto it = set->begin(); it != set->end();) {
      Block* block = *it;
      if (!block->whole_segment()) {
        ++it;
        continue;
      }
      auto next = std::next(it);
      block->node = set->extract(it);
      it = next;
      block->is_free = false;
      free_bytes_ -= block->size;
      --free_blocks_;
      --segments_;
      dropped.push_back({block->ptr(), block->size, block->device});
      retire(block);
    }
  }
  return dropped;
}

// ---- CachingAllocator -----------------------------------------------------------------------

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: the pluggable-allocator hooks may free after static destruction began.
  static auto* pool = new CachingAllocator();
  return *pool;
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

// Pinned buffers are reused by exact size class: four classes per power of two keep the
// waste under 25% with few classes (host allocations are rare and not split).
std::size_t pinned_size_class(std::size_t bytes) {
  check_request_bytes(bytes, "pinned allocation");
  if (bytes <= kMinBlock) return kMinBlock;
  std::size_t power = kMinBlock;
  while (power * 2 < bytes) power *= 2;
  const std::size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}
}  // namespace

void* CachingAllocator::driver_malloc(std::size_t size, int device, std::size_t requested) {
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) XRT_CUDA_CHECK(cudaSetDevice(device));
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    // Give every whole free segment back and try once more before reporting OOM.
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
            std::to_string(requested) + " bytes (a segment of " + std::to_string(size) +
            " bytes) but only " + std::to_string(free_bytes) +
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
  int previous = 0;
  cudaGetDevice(&previous);
  for (const BlockArena::Segment& segment : arena_.drop_free_segments()) {
    cudaSetDevice(segment.device);
    cudaFree(segment.ptr);
    ++stats_.driver_frees;
    stats_.reserved -= segment.size;
  }
  cudaSetDevice(previous);
  cudaGetLastError();
}

void* CachingAllocator::allocate(std::size_t bytes, int device, void* stream) {
  const std::size_t size = size_class_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = arena_.take_cached(size, device, stream);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    const std::size_t segment = segment_bytes(size);
    void* base = driver_malloc(segment, device, bytes);
    block = arena_.take_from_new_segment(base, segment, size, device, stream);
  }
  block->requested = bytes;
  if (spare_live_nodes_.empty()) {
    live_.emplace(block->ptr(), block);
  } else {
    LiveMap::node_type node = std::move(spare_live_nodes_.back());
    spare_live_nodes_.pop_back();
    node.key() = block->ptr();
    node.mapped() = block;
    live_.insert(std::move(node));
  }
  ++stats_.allocations;
  ++stats_.live_blocks;
  stats_.allocated += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return block->ptr();
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw InvalidArgumentError("pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                               " was not allocated by the xpuruntime pool (double free?)");
  }
  Block* block = it->second;
  spare_live_nodes_.push_back(live_.extract(it));
  stats_.allocated -= block->requested;
  --stats_.live_blocks;
  if (!capturing_.empty()) {
    auto capture = capturing_.find(block->stream);
    if (capture != capturing_.end()) {
      // A captured graph may still read or write this block on replay: it stays out of the
      // free sets (and its neighbours cannot merge into it) until the graph is destroyed.
      graph_held_[capture->second].push_back(block);
      return;
    }
  }
  arena_.give_back(block);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Blocks reused only on their own stream may still be in use by queued work there.
  if (arena_.free_blocks() > 0) cudaDeviceSynchronize();
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
  const std::size_t size = pinned_size_class(bytes);
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
  for (Block* block : it->second) arena_.give_back(block);
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
  s.cached = arena_.free_bytes();
  s.cached_blocks = arena_.free_blocks();
  s.segments = arena_.segments();
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
