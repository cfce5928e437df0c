// A tensor view shared with other frameworks through DLPack. The storage is kept alive by
// `holder` (a pool block, a host buffer, or the producer's DLManagedTensor), so import and
// export never copy. Views may be strided (a transpose, a slice); each kernel says which
// layouts it takes, and the rest are asked to call .contiguous() first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct DLManagedTensor;
struct DLManagedTensorVersioned;

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
  void* data = nullptr;  // the first element
  std::vector<std::int64_t> shape;
  // In elements, one per dimension; empty means row-major contiguous (tensors built by hand).
  std::vector<std::int64_t> strides;
  DType dtype = DType::F32;
  DeviceRef device;
  bool pinned = false;  // host memory page-locked by cudaHostAlloc
  bool read_only = false;  // imported with DLPack's read-only flag (kernels only read it)

  // Overflow-checked: InvalidArgumentError for a shape whose product exceeds int64.
  std::int64_t numel() const;
  // Bytes of the elements (numel * itemsize), checked against kMaxBytes.
  std::size_t nbytes() const;
  std::int64_t stride(std::size_t dim) const;  // strides[dim], or the contiguous stride
  // Row-major contiguous (size-1 dimensions may carry any stride).
  bool is_contiguous() const;
  std::string shape_str() const;
  std::string strides_str() const;  // the effective strides, "[3, 1]"

  // Fresh uninitialised contiguous storage: CUDA from the caching pool on `stream`, CPU
  // 64-byte aligned. InvalidArgumentError for negative dimensions or sizes beyond 2^62 bytes.
  static Tensor empty(const std::vector<std::int64_t>& shape, DType dtype, DeviceRef device,
                      void* stream = nullptr);
  static std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape);
};

// Zero-copy import. Takes ownership of `managed`: when the last view dies, `release` runs
// (default: the producer's deleter; the Python bindings pass one that takes the GIL first).
// Strided views are kept as they are. Every size is checked: a malformed tensor (negative or
// overflowing shape, strides or byte offset, null or misaligned data) is an
// InvalidArgumentError; unsupported dtypes and devices are UnsupportedOperationError.
using DLPackRelease = void (*)(DLManagedTensor*);
Tensor tensor_from_dlpack(DLManagedTensor* managed, DLPackRelease release = nullptr);
// The same for DLPack 1.x versioned tensors (which may be read-only).
using DLPackVersionedRelease = void (*)(DLManagedTensorVersioned*);
Tensor tensor_from_dlpack(DLManagedTensorVersioned* managed,
                          DLPackVersionedRelease release = nullptr);
// Zero-copy export (shape and strides written): the returned tensor keeps `t`'s storage
// alive until its deleter runs.
DLManagedTensor* tensor_to_dlpack(const Tensor& t);
DLManagedTensorVersioned* tensor_to_dlpack_versioned(const Tensor& t);

}  // namespace xrt
