#include "xpuruntime/checked.h"

#include "xpuruntime/errors.h"

namespace xrt {

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw InvalidArgumentError(what + ": " + std::to_string(a) + " * " + std::to_string(b) +
                               " overflows 64-bit arithmetic");
  }
  return out;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw InvalidArgumentError(what + ": " + std::to_string(a) + " + " + std::to_string(b) +
                               " overflows 64-bit arithmetic");
  }
  return out;
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& what) {
  if (shape.size() > static_cast<std::size_t>(kMaxDims)) {
    throw InvalidArgumentError(what + ": " + std::to_string(shape.size()) +
                               " dimensions, more than the " + std::to_string(kMaxDims) +
                               " a tensor may have");
  }
  std::int64_t n = 1;
  bool overflow = false;
  for (auto s : shape) {
    if (s < 0) {
      throw InvalidArgumentError(what + ": negative dimension in shape " + dims_text(shape));
    }
    overflow = overflow || __builtin_mul_overflow(n, s, &n);
  }
  // A zero dimension makes the product 0 whatever overflowed before it.
  for (auto s : shape) {
    if (s == 0) return 0;
  }
  if (overflow) {
    throw InvalidArgumentError(what + ": shape " + dims_text(shape) +
                               " has more than 2^63 - 1 elements");
  }
  return n;
}

std::int64_t checked_nbytes(std::int64_t numel, std::size_t itemsize, const std::string& what) {
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(itemsize), &bytes) ||
      bytes > kMaxBytes) {
    throw InvalidArgumentError(what + ": " + std::to_string(numel) + " elements of " +
                               std::to_string(itemsize) + " bytes exceed the 2^62-byte limit " +
                               "of a tensor");
  }
  return bytes;
}

Extent checked_extent(const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& strides, const std::string& what) {
  Extent e;
  for (auto s : shape) {
    if (s == 0) return e;
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t reach =
        checked_mul(shape[i] - 1, strides[i], what + ": extent of strides " + dims_text(strides));
    if (reach < 0) {
      e.low = checked_add(e.low, reach, what + ": extent of strides " + dims_text(strides));
    } else {
      e.high = checked_add(e.high, reach, what + ": extent of strides " + dims_text(strides));
    }
  }
  return e;
}

}  // namespace xrt
