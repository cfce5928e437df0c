#include "xpuruntime/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "dlpack/dlpack.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/device.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/memory.h"

namespace xrt {

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
  std::uint8_t dl_code;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "float32", 4, kDLFloat},  {DType::F64, "float64", 8, kDLFloat},
    {DType::F16, "float16", 2, kDLFloat},  {DType::BF16, "bfloat16", 2, kDLBfloat},
    {DType::I8, "int8", 1, kDLInt},        {DType::U8, "uint8", 1, kDLUInt},
    {DType::I32, "int32", 4, kDLInt},      {DType::I64, "int64", 8, kDLInt},
    {DType::Bool, "bool", 1, kDLBool},
};
const DTypeInfo& info(DType d) { return kDTypes[static_cast<int>(d)]; }

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& d : kDTypes) names.emplace_back(d.name);
  return names;
}

DType dtype_from_dl(DLDataType t) {
  if (t.lanes == 1) {
    for (const auto& d : kDTypes) {
      if (d.dl_code == t.code && d.size * 8 == t.bits) return d.dtype;
    }
  }
  static const char* codes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex",
                                "bool"};
  const std::string code = t.code < 7 ? codes[t.code] : "code " + std::to_string(t.code);
  throw UnsupportedOperationError(
      "DLPack tensor has dtype " + code + std::to_string(t.bits) +
      (t.lanes != 1 ? " x" + std::to_string(t.lanes) + " lanes" : std::string()) +
      ", which xpuruntime does not support; supported dtypes: " + join_names(dtype_names()) +
      ". Convert it first (for example tensor.to(torch.float32) or array.astype('float32')).");
}

const char* dl_device_name(int type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host (pinned)";
    case kDLOpenCL: return "opencl";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    case kDLROCM: return "rocm";
    case kDLCUDAManaged: return "cuda_managed";
    case kDLOneAPI: return "oneapi";
    default: return "unknown";
  }
}

// Owns a copy of shape/strides for the exported DLManagedTensor and keeps storage alive.
struct ExportContext {
  std::shared_ptr<void> holder;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};
}  // namespace

const char* dtype_name(DType dtype) { return info(dtype).name; }
std::size_t dtype_size(DType dtype) { return info(dtype).size; }

DType dtype_from_name(const std::string& name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.dtype;
  }
  const auto names = dtype_names();
  const std::string hint = closest_name(name, names);
  throw InvalidArgumentError("unknown dtype '" + name + "'" +
                             (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                             "; valid dtypes: " + join_names(names));
}

std::string DeviceRef::str() const {
  return kind == DeviceKind::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

DeviceRef parse_device(const std::string& text) {
  if (text == "cpu") return {DeviceKind::CPU, 0};
  if (text == "cuda") return {DeviceKind::CUDA, 0};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    std::size_t used = 0;
    int index = -1;
    try {
      index = std::stoi(text.substr(5), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == text.size() - 5 && index >= 0) return {DeviceKind::CUDA, index};
  }
  throw InvalidArgumentError("invalid device '" + text +
                             "'; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0");
}

std::int64_t Tensor::numel() const { return checked_numel(shape, "tensor"); }

std::size_t Tensor::nbytes() const {
  return static_cast<std::size_t>(checked_nbytes(numel(), dtype_size(dtype), "tensor"));
}

std::vector<std::int64_t> Tensor::contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  std::int64_t running = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    // Saturate instead of overflowing: only reachable for shapes numel() already rejects.
    if (shape[i] > 1 && __builtin_mul_overflow(running, shape[i], &running)) running = kMaxBytes;
  }
  return strides;
}

std::int64_t Tensor::stride(std::size_t dim) const {
  if (!strides.empty()) return strides.at(dim);
  return contiguous_strides(shape).at(dim);
}

bool Tensor::is_contiguous() const {
  if (strides.empty()) return true;
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[i], &expected)) return false;
  }
  return true;
}

std::string Tensor::shape_str() const { return dims_text(shape); }

std::string Tensor::strides_str() const {
  return dims_text(strides.empty() ? contiguous_strides(shape) : strides);
}

Tensor Tensor::empty(const std::vector<std::int64_t>& shape, DType dtype, DeviceRef device,
                     void* stream) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.device = device;
  const std::string what = std::string("empty ") + dtype_name(dtype);
  const std::int64_t numel = checked_numel(shape, what);
  t.strides = contiguous_strides(shape);
  const auto bytes =
      static_cast<std::size_t>(std::max<std::int64_t>(checked_nbytes(numel, dtype_size(dtype), what), 1));
  if (device.kind == DeviceKind::CUDA) {
    DeviceManager::instance().check_device(device);
    auto& pool = CachingAllocator::instance();
    void* p = pool.allocate(bytes, device.index, stream);
    t.holder = std::shared_ptr<void>(p, [](void* q) { CachingAllocator::instance().free(q); });
  } else {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);  // bytes <= 2^62: no overflow
    if (!p) throw std::bad_alloc();
    t.holder = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  t.data = t.holder.get();
  return t;
}

namespace {
void call_producer_deleter(DLManagedTensor* m) {
  if (m->deleter) m->deleter(m);
}
}  // namespace

namespace {
// The checked view of `dl`, kept alive by `holder`.
Tensor view_of(const DLTensor& dl, std::shared_ptr<void> holder) {
  Tensor t;
  t.holder = std::move(holder);
  const int dev = dl.device.device_type;
  if (dev == kDLCPU || dev == kDLCUDAHost) {
    t.device = {DeviceKind::CPU, 0};
    t.pinned = dev == kDLCUDAHost;
  } else if (dev == kDLCUDA) {
    if (dl.device.device_id < 0) {
      throw InvalidArgumentError("DLPack tensor names CUDA device " +
                                 std::to_string(dl.device.device_id) + ", which is negative");
    }
    t.device = {DeviceKind::CUDA, dl.device.device_id};
  } else {
    throw UnsupportedOperationError(
        std::string("DLPack tensor lives on device type '") + dl_device_name(dev) +
        "', which xpuruntime cannot use; supported: cpu, cuda, cuda_host. Copy it to the "
        "CPU or a CUDA device first.");
  }
  t.dtype = dtype_from_dl(dl.dtype);
  if (dl.ndim < 0 || dl.ndim > kMaxDims) {
    throw InvalidArgumentError("DLPack tensor has ndim " + std::to_string(dl.ndim) +
                               "; xpuruntime takes 0 to " + std::to_string(kMaxDims) +
                               " dimensions");
  }
  if (dl.ndim > 0 && dl.shape == nullptr) {
    throw InvalidArgumentError("DLPack tensor has ndim " + std::to_string(dl.ndim) +
                               " but no shape array");
  }
  t.shape.assign(dl.shape, dl.shape + dl.ndim);
  const std::string what = "DLPack tensor of shape " + t.shape_str();
  const std::int64_t numel = checked_numel(t.shape, what);
  const auto itemsize = static_cast<std::int64_t>(dtype_size(t.dtype));
  checked_nbytes(numel, dtype_size(t.dtype), what);
  if (dl.strides != nullptr) {
    t.strides.assign(dl.strides, dl.strides + dl.ndim);
  } else {
    t.strides = Tensor::contiguous_strides(t.shape);  // DLPack: null strides = row-major
  }
  const Extent extent = checked_extent(t.shape, t.strides, what);
  std::int64_t reach = 0;
  if (__builtin_sub_overflow(extent.high, extent.low, &reach)) {
    throw InvalidArgumentError(what + ": strides " + t.strides_str() +
                               " reach more than 2^63 - 1 elements");
  }
  const std::int64_t span = checked_add(reach, 1, what);
  checked_nbytes(span, dtype_size(t.dtype), what + " with strides " + t.strides_str());
  if (dl.byte_offset > static_cast<std::uint64_t>(kMaxBytes)) {
    throw InvalidArgumentError(what + ": byte_offset " + std::to_string(dl.byte_offset) +
                               " exceeds the 2^62-byte limit");
  }
  if (numel > 0) {
    if (dl.data == nullptr) throw InvalidArgumentError(what + " has a null data pointer");
    const auto first = reinterpret_cast<std::uintptr_t>(dl.data) + dl.byte_offset;
    // The lowest address the view reaches must not wrap around below zero.
    const std::uint64_t below = static_cast<std::uint64_t>(-extent.low) *
                                static_cast<std::uint64_t>(itemsize);
    if (first < below || first > UINTPTR_MAX - static_cast<std::uint64_t>(extent.high) *
                                                    static_cast<std::uint64_t>(itemsize)) {
      throw InvalidArgumentError(what + ": data pointer, byte_offset and strides reach outside "
                                 "the address space");
    }
    if (first % static_cast<std::uintptr_t>(itemsize) != 0) {
      throw UnsupportedOperationError(
          what + " starts at an address not aligned to its " + std::to_string(itemsize) +
          "-byte elements; copy it first (numpy.ascontiguousarray(array), tensor.clone()).");
    }
  }
  t.data = static_cast<char*>(dl.data) + dl.byte_offset;
  return t;
}

void call_versioned_deleter(DLManagedTensorVersioned* m) {
  if (m->deleter) m->deleter(m);
}
}  // namespace

Tensor tensor_from_dlpack(DLManagedTensor* managed, DLPackRelease release) {
  if (managed == nullptr) throw InvalidArgumentError("DLPack import: null DLManagedTensor");
  // Own the producer's tensor first, so every error path below still releases it.
  std::shared_ptr<DLManagedTensor> owner(managed, release ? release : call_producer_deleter);
  return view_of(managed->dl_tensor, owner);
}

Tensor tensor_from_dlpack(DLManagedTensorVersioned* managed, DLPackVersionedRelease release) {
  if (managed == nullptr) throw InvalidArgumentError("DLPack import: null DLManagedTensorVersioned");
  std::shared_ptr<DLManagedTensorVersioned> owner(managed,
                                                  release ? release : call_versioned_deleter);
  if (managed->version.major != DLPACK_MAJOR_VERSION) {
    throw UnsupportedOperationError("DLPack tensor of version " +
                                    std::to_string(managed->version.major) + "." +
                                    std::to_string(managed->version.minor) +
                                    "; xpuruntime reads major version " +
                                    std::to_string(DLPACK_MAJOR_VERSION));
  }
  Tensor t = view_of(managed->dl_tensor, owner);
  t.read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  return t;
}

namespace {
void fill_dltensor(DLTensor& dl, const Tensor& t, ExportContext* ctx) {
  dl.data = t.data;
  dl.device = t.device.kind == DeviceKind::CUDA ? DLDevice{kDLCUDA, t.device.index}
                                                : DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<std::int32_t>(t.shape.size());
  dl.dtype = {info(t.dtype).dl_code, static_cast<std::uint8_t>(info(t.dtype).size * 8), 1};
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
}
}  // namespace

DLManagedTensorVersioned* tensor_to_dlpack_versioned(const Tensor& t) {
  auto* ctx = new ExportContext{t.holder, t.shape,
                                t.strides.empty() ? Tensor::contiguous_strides(t.shape) : t.strides};
  auto* m = new DLManagedTensorVersioned{};
  m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->manager_ctx = ctx;
  m->deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  m->flags = t.read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  fill_dltensor(m->dl_tensor, t, ctx);
  return m;
}

DLManagedTensor* tensor_to_dlpack(const Tensor& t) {
  auto* ctx = new ExportContext{t.holder, t.shape,
                                t.strides.empty() ? Tensor::contiguous_strides(t.shape) : t.strides};
  auto* m = new DLManagedTensor{};
  m->manager_ctx = ctx;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  // Pinned host memory is exported as plain CPU memory: every consumer reads kDLCPU, not all
  // of them read kDLCUDAHost.
  fill_dltensor(m->dl_tensor, t, ctx);
  return m;
}

}  // namespace xrt
