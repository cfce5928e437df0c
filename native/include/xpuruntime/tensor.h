// A contiguous tensor view shared with other frameworks through DLPack. The storage is kept
// alive by `holder` (a pool block, a host buffer, or the producer's DLManagedTensor), so
// import and export never copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct DLManagedTensor;

namespace xrt {

enum class DType : std::uint8_t { F32, F64, F16, BF16, I8, U8, I32, I64, Bool };

// numpy-style names: "float32", "bfloat16", ...
const char* dtype_name(DType dtype);
DType dtype_from_name(const std::string& name);  // InvalidArgumentError with choices
std::size_t dtype_size(DType dtype);

enum class DeviceKind : std::uint8_t { CPU, CUDA };

struct DeviceRef {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  bool operator==(const DeviceRef& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const DeviceRef& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"
};
// Parses "cpu", "cuda", "cuda:N"; InvalidArgumentError otherwise.
DeviceRef parse_device(const std::string& text);

struct Tensor {
  std::shared_ptr<void> holder;
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  DType dtype = DType::F32;
  DeviceRef device;
  bool pinned = false;  // host memory page-locked by cudaHostAlloc

  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  std::string shape_str() const;

  // Fresh uninitialised storage: CUDA from the caching pool on `stream`, CPU 64-byte aligned.
  static Tensor empty(const std::vector<std::int64_t>& shape, DType dtype, DeviceRef device,
                      void* stream = nullptr);
};

// Zero-copy import. Takes ownership of `managed`: when the last view dies, `release` runs
// (default: the producer's deleter; the Python bindings pass one that takes the GIL first).
// Rejects non-contiguous layouts, unsupported dtypes and devices with typed errors.
using DLPackRelease = void (*)(DLManagedTensor*);
Tensor tensor_from_dlpack(DLManagedTensor* managed, DLPackRelease release = nullptr);
// Zero-copy export: the returned tensor keeps `t`'s storage alive until its deleter runs.
DLManagedTensor* tensor_to_dlpack(const Tensor& t);

}  // namespace xrt
