#include "xpuruntime/tensor.h"

#include <cstdlib>
#include <new>

#include "dlpack/dlpack.h"
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

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(const std::vector<std::int64_t>& shape, DType dtype, DeviceRef device,
                     void* stream) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.device = device;
  for (auto s : shape) {
    if (s < 0) throw InvalidArgumentError("negative dimension in shape " + t.shape_str());
  }
  const std::size_t bytes = std::max<std::size_t>(t.nbytes(), 1);
  if (device.kind == DeviceKind::CUDA) {
    DeviceManager::instance().check_device(device);
    auto& pool = CachingAllocator::instance();
    void* p = pool.allocate(bytes, device.index, stream);
    t.holder = std::shared_ptr<void>(p, [](void* q) { CachingAllocator::instance().free(q); });
  } else {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
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

Tensor tensor_from_dlpack(DLManagedTensor* managed, DLPackRelease release) {
  // Own the producer's tensor first, so every error path below still releases it.
  std::shared_ptr<DLManagedTensor> owner(managed,
                                         release ? release : call_producer_deleter);
  const DLTensor& dl = managed->dl_tensor;
  Tensor t;
  t.holder = owner;
  const int dev = dl.device.device_type;
  if (dev == kDLCPU || dev == kDLCUDAHost) {
    t.device = {DeviceKind::CPU, 0};
    t.pinned = dev == kDLCUDAHost;
  } else if (dev == kDLCUDA) {
    t.device = {DeviceKind::CUDA, dl.device.device_id};
  } else {
    throw UnsupportedOperationError(
        std::string("DLPack tensor lives on device type '") + dl_device_name(dev) +
        "', which xpuruntime cannot use; supported: cpu, cuda, cuda_host. Copy it to the "
        "CPU or a CUDA device first.");
  }
  t.dtype = dtype_from_dl(dl.dtype);
  t.shape.assign(dl.shape, dl.shape + dl.ndim);
  if (dl.strides != nullptr) {
    // Compact row-major strides are required; size-1 dimensions may carry any stride.
    std::int64_t expected = 1;
    for (int i = dl.ndim - 1; i >= 0; --i) {
      if (dl.shape[i] != 1 && dl.strides[i] != expected) {
        std::string strides;
        for (int j = 0; j < dl.ndim; ++j) {
          strides += (j ? ", " : "") + std::to_string(dl.strides[j]);
        }
        throw UnsupportedOperationError(
            "DLPack tensor of shape " + t.shape_str() + " is not contiguous (strides [" +
            strides + "] in elements); xpuruntime takes row-major contiguous tensors only. "
            "Make it contiguous first (tensor.contiguous(), numpy.ascontiguousarray(array)).");
      }
      expected *= dl.shape[i];
    }
  }
  t.data = static_cast<char*>(dl.data) + dl.byte_offset;
  return t;
}

DLManagedTensor* tensor_to_dlpack(const Tensor& t) {
  auto* ctx = new ExportContext{t.holder, t.shape};
  auto* m = new DLManagedTensor{};
  m->manager_ctx = ctx;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  DLTensor& dl = m->dl_tensor;
  dl.data = t.data;
  if (t.device.kind == DeviceKind::CUDA) {
    dl.device = {kDLCUDA, t.device.index};
  } else {
    // Pinned host memory is exported as plain CPU memory: every consumer reads kDLCPU,
    // not all of them read kDLCUDAHost.
    dl.device = {kDLCPU, 0};
  }
  dl.ndim = static_cast<std::int32_t>(t.shape.size());
  dl.dtype = {info(t.dtype).dl_code, static_cast<std::uint8_t>(info(t.dtype).size * 8), 1};
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;  // compact row-major
  dl.byte_offset = 0;
  return m;
}

}  // namespace xrt
