// Typed errors of the native core. The Python bindings map each class onto the class of the
// same name in xpuruntime.runtime.errors, so a message written here is what the user reads:
// say what was wrong and what to do.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace xrt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad argument from the caller (device index out of range, unknown dtype, ...).
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime/library call failed, or a CUDA library is missing at run time.
class CudaError : public Error {
 public:
  using Error::Error;
};

class OutOfMemoryError : public CudaError {
 public:
  OutOfMemoryError(const std::string& message, std::size_t requested, std::size_t free_bytes)
      : CudaError(message), requested_bytes(requested), free_bytes(free_bytes) {}
  std::size_t requested_bytes;
  std::size_t free_bytes;
};

// No kernel can run what was asked (pinned kernel unsupported, unknown op, bad layout).
class UnsupportedOperationError : public Error {
 public:
  using Error::Error;
};

// "a, b, c" from a list of names, for "valid choices are ..." messages.
template <typename Container>
std::string join_names(const Container& names, const char* sep = ", ") {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

// The closest name by edit distance, or "" when nothing is close (for did-you-mean hints).
std::string closest_name(const std::string& name, const std::vector<std::string>& choices);

}  // namespace xrt
