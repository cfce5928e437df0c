// Overflow-checked size arithmetic. Every shape product, byte count and view extent in the
// native core goes through these, so a shape like [2**62] or [2**40, 2**40] is an
// InvalidArgumentError naming the shape instead of a tensor whose size wrapped around.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xrt {

// The largest byte size of a tensor, an allocation or a view's extent: 2^62. Keeping sizes this
// far below 2^63 lets allocators round them up and kernels add offsets without overflowing.
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 62;
// The most dimensions a tensor may have (as numpy and PyTorch).
inline constexpr int kMaxDims = 64;

// a * b and a + b for int64, or InvalidArgumentError("<what>: ... overflows") on overflow.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what);
std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what);

// Product of the dimensions of `shape` (each must be >= 0), or InvalidArgumentError naming
// `what` and the shape when a dimension is negative or the product exceeds int64.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& what);
// numel * itemsize, or InvalidArgumentError when it exceeds kMaxBytes.
std::int64_t checked_nbytes(std::int64_t numel, std::size_t itemsize, const std::string& what);

// The element offsets a strided view reaches, relative to its first element: [low, high]
// (low <= 0 <= high; both 0 for an empty view). InvalidArgumentError on overflow.
struct Extent {
  std::int64_t low = 0;
  std::int64_t high = 0;
};
Extent checked_extent(const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& strides, const std::string& what);

std::string dims_text(const std::vector<std::int64_t>& dims);  // "[2, 3]"

}  // namespace xrt
