// MemoryManager: a caching pool allocator for CUDA device memory and page-locked host buffers.
//
// Requests are rounded up to size classes (four per power of two, 512 B minimum) and a freed
// block goes back to the free list of the stream it was used on; it is only handed out again
// on that stream, so stream order makes reuse safe without events. When the driver runs out,
// the pool synchronises, returns every cached block and retries once before raising
// OutOfMemoryError. Blocks freed while their stream is being captured into a CUDA graph stay
// reserved for that graph until it is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace xrt {

struct MemoryStats {
  std::size_t allocated = 0;        // bytes requested by live allocations
  std::size_t reserved = 0;         // bytes held from the driver (live + cached)
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
  std::size_t cached = 0;           // bytes in free lists
  std::uint64_t driver_allocations = 0;  // cudaMalloc calls that succeeded
  std::uint64_t driver_frees = 0;
  std::uint64_t allocations = 0;    // pool allocations served
  std::uint64_t cache_hits = 0;
  std::uint64_t live_blocks = 0;
  std::uint64_t cached_blocks = 0;
  // Share of reserved memory not holding requested bytes (cached blocks and size-class
  // rounding), 0..1.
  double fragmentation = 0.0;
  std::size_t pinned_reserved = 0;
  std::size_t pinned_allocated = 0;
};

// Rounds a request up to its size class.
std::size_t size_class_bytes(std::size_t bytes);

class CachingAllocator {
 public:
  static CachingAllocator& instance();

  // Device memory on `device` usable in order on `stream` (a cudaStream_t, nullptr = legacy
  // default). Throws OutOfMemoryError (requested and free bytes) or CudaError.
  void* allocate(std::size_t bytes, int device, void* stream);
  // Returns a block to its stream's free list; unknown pointers raise InvalidArgumentError.
  void free(void* ptr);
  // Returns every cached (free) block to the driver; live blocks are untouched.
  void empty_cache();
  MemoryStats stats();
  void reset_peak();

  // Page-locked host memory, cached by size class as well.
  void* allocate_pinned(std::size_t bytes);
  void free_pinned(void* ptr);

  // CUDA graph support: while `stream` is captured, frees of blocks used on it are held by
  // the capture `owner` until release_graph_blocks(owner).
  void begin_capture(void* stream, const void* owner);
  void end_capture(void* stream);
  void release_graph_blocks(const void* owner);

 private:
  CachingAllocator() = default;
  struct Block {
    void* ptr;
    std::size_t size;       // size class actually reserved
    std::size_t requested;  // bytes asked for
    int device;
    void* stream;
  };
  static std::uint64_t free_key(int device, void* stream, std::size_t size);
  void* driver_malloc(std::size_t size, int device, std::size_t requested);
  void release_cached_locked();

  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::vector<Block>> free_blocks_;
  std::unordered_map<void*, Block> live_;
  std::unordered_map<void*, const void*> capturing_;  // stream -> graph owner
  std::unordered_map<const void*, std::vector<Block>> graph_held_;
  std::unordered_map<std::size_t, std::vector<void*>> pinned_free_;
  std::unordered_map<void*, std::size_t> pinned_live_;
  MemoryStats stats_;
};

}  // namespace xrt
