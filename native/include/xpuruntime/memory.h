// MemoryManager: a caching pool allocator for CUDA device memory and page-locked host buffers.
//
// It reuses memory the way PyTorch's caching allocator does. Requests are rounded up to
// 512-byte multiples. Driver allocations are segments: requests up to 1 MiB share 2 MiB
// segments (the small pool), requests up to 10 MiB share 20 MiB segments, larger ones get a
// segment of their own rounded up to 2 MiB (the large pool). An allocation takes the smallest
// free block of its pool that fits (best fit) and splits off the rest as a free block of the
// same segment when it is big enough to be useful (small pool: 512 B or more, large pool:
// more than 1 MiB); a freed block merges with its free neighbours. empty_cache() returns only
// whole free segments to the driver.
//
// A freed block goes back to the free set of the stream it was used on and is only handed
// out again on that stream, so stream order makes reuse safe without events. When the driver
// runs out, the pool synchronises, returns every whole free segment and retries once before
// raising OutOfMemoryError. Blocks freed while their stream is being captured into a CUDA
// graph stay reserved for that graph until it is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace xrt {

struct MemoryStats {
  std::size_t allocated = 0;        // bytes requested by live allocations
  std::size_t reserved = 0;         // bytes held from the driver (segments)
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
  std::size_t cached = 0;           // bytes in free blocks
  std::uint64_t driver_allocations = 0;  // cudaMalloc calls that succeeded
  std::uint64_t driver_frees = 0;
  std::uint64_t allocations = 0;    // pool allocations served
  std::uint64_t cache_hits = 0;     // allocations served from a cached block (no cudaMalloc)
  std::uint64_t live_blocks = 0;
  std::uint64_t cached_blocks = 0;  // free blocks (whole segments and split-off remainders)
  std::uint64_t segments = 0;       // driver allocations currently held
  // Share of reserved memory not holding requested bytes (free blocks and 512-byte
  // rounding), 0..1.
  double fragmentation = 0.0;
  std::size_t pinned_reserved = 0;
  std::size_t pinned_allocated = 0;
};

// Rounding, as in PyTorch's CUDACachingAllocator.
namespace pool_sizes {
inline constexpr std::size_t kMinBlock = 512;              // every block is a multiple of this
inline constexpr std::size_t kSmallRequest = 1 << 20;      // up to this: the small pool
inline constexpr std::size_t kSmallSegment = 2 << 20;      // segment size of the small pool
inline constexpr std::size_t kMidSegment = 20 << 20;       // segment for 1..10 MiB requests
inline constexpr std::size_t kOwnSegment = 10 << 20;       // from here a request gets its own
inline constexpr std::size_t kSegmentRounding = 2 << 20;   // ...rounded up to this
}  // namespace pool_sizes

// InvalidArgumentError naming `what` when `bytes` exceeds kMaxBytes (xpuruntime/checked.h).
void check_request_bytes(std::size_t bytes, const char* what);
// Bytes a request of `bytes` occupies in the pool (a 512-byte multiple); checks the request.
std::size_t size_class_bytes(std::size_t bytes);
// Driver allocation (segment) made for a block of `block_bytes` when no free block fits.
std::size_t segment_bytes(std::size_t block_bytes);

// The bookkeeping of the pool, without any driver call: segments of address space cut into
// blocks, per-(device, stream) free sets ordered by (size, address) for best fit, splitting
// and coalescing. Not thread-safe; CachingAllocator guards it with its mutex.
class BlockArena {
 public:
  struct Block;
  struct BlockOrder {  // (device, stream, size, address); one set per pool
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockOrder>;

  struct Block {
    std::uintptr_t addr = 0;
    std::size_t size = 0;
    std::size_t requested = 0;  // bytes asked for while allocated
    int device = 0;
    void* stream = nullptr;
    Block* prev = nullptr;  // address neighbours inside the same segment
    Block* next = nullptr;
    bool small = false;     // belongs to a small-pool segment
    bool is_free = false;   // in the free set; only free blocks merge
    // The free-set node, kept while the block is out of the set so that taking a block and
    // giving it back allocate nothing (the alloc+free fast path stays allocation-free).
    FreeSet::node_type node;
    FreeSet::iterator where;  // position in the free set while is_free: erasing needs no search

    void* ptr() const { return reinterpret_cast<void*>(addr); }
    bool whole_segment() const { return prev == nullptr && next == nullptr; }
  };

  struct Segment {
    void* ptr;
    std::size_t size;
    int device;
  };

  // The smallest free block on (device, stream) of the pool `size` belongs to that holds
  // `size` bytes, split to size when the rest is worth keeping; nullptr when none fits.
  Block* take_cached(std::size_t size, int device, void* stream);
  // Registers a driver segment [base, base + segment_size) and takes `size` bytes from it.
  Block* take_from_new_segment(void* base, std::size_t segment_size, std::size_t size,
                               int device, void* stream);
  // Marks an allocated block free and merges it with its free neighbours.
  void give_back(Block* block);
  // Removes every free block that spans a whole segment and returns those segments (for
  // cudaFree); partly used segments stay.
  std::vector<Segment> drop_free_segments();

  std::size_t free_bytes() const { return free_bytes_; }
  std::uint64_t free_blocks() const { return free_blocks_; }
  std::uint64_t segments() const { return segments_; }

 private:
  FreeSet& free_set(bool small) { return small ? small_free_ : large_free_; }
  Block* new_block();
  void retire(Block* block);
  void insert_free(Block* block);
  void erase_free(Block* block);
  Block* split(Block* block, std::size_t size);

  FreeSet small_free_;
  FreeSet large_free_;
  std::deque<Block> storage_;  // owns every Block; a deque keeps their addresses stable
  std::vector<Block*> spare_;  // retired Blocks (merged away), reused before growing storage_
  std::size_t free_bytes_ = 0;
  std::uint64_t free_blocks_ = 0;
  std::uint64_t segments_ = 0;
};

class CachingAllocator {
 public:
  static CachingAllocator& instance();

  // Device memory on `device` usable in order on `stream` (a cudaStream_t, nullptr = legacy
  // default). Throws OutOfMemoryError (requested and free bytes) or CudaError.
  void* allocate(std::size_t bytes, int device, void* stream);
  // Returns a block to its stream's free set; unknown pointers raise InvalidArgumentError.
  void free(void* ptr);
  // Returns every whole free segment to the driver; live blocks and the segments they are
  // in are untouched.
  void empty_cache();
  MemoryStats stats();
  void reset_peak();

  // Page-locked host memory, cached by size class (four per power of two) for exact reuse.
  void* allocate_pinned(std::size_t bytes);
  void free_pinned(void* ptr);

  // CUDA graph support: while `stream` is captured, frees of blocks used on it are held by
  // the capture `owner` until release_graph_blocks(owner).
  void begin_capture(void* stream, const void* owner);
  void end_capture(void* stream);
  void release_graph_blocks(const void* owner);

 private:
  CachingAllocator() = default;
  using Block = BlockArena::Block;
  using LiveMap = std::unordered_map<void*, Block*>;
  void* driver_malloc(std::size_t size, int device, std::size_t requested);
  void release_cached_locked();

  std::mutex mutex_;
  BlockArena arena_;
  LiveMap live_;
  std::vector<LiveMap::node_type> spare_live_nodes_;  // reused so that free+alloc allocate nothing
  std::unordered_map<void*, const void*> capturing_;  // stream -> graph owner
  std::unordered_map<const void*, std::vector<Block*>> graph_held_;
  std::unordered_map<std::size_t, std::vector<void*>> pinned_free_;
  std::unordered_map<void*, std::size_t> pinned_live_;
  MemoryStats stats_;
};

}  // namespace xrt
