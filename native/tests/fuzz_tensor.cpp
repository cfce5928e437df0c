// Fuzz driver for the allocation and DLPack paths: random shapes, strides, dtypes, devices,
// byte offsets and data pointers through tensor_from_dlpack and Tensor::empty, and the CPU
// ops on the views that import. Passes when every call either succeeds or raises a typed
// error (xrt::Error or std::bad_alloc for a host allocation the machine cannot back); a
// crash, an untyped exception or (under AddressSanitizer) an out-of-bounds access fails it.
//
//   fuzz_tensor [iterations=2000] [seed=1]
//
// ctest runs a short bounded pass; `nox -s native_asan` runs a long one under ASan + UBSan.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "dlpack/dlpack.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/ops.h"
#include "xpuruntime/tensor.h"

using namespace xrt;

namespace {
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }
};

// Mostly small dimensions, sometimes zero, huge, negative or at the int64 edges.
std::int64_t dimension(Rng& r) {
  const std::int64_t pick = r.below(100);
  if (pick < 70) return r.below(6);
  if (pick < 80) return 0;
  if (pick < 88) return std::int64_t{1} << r.below(63);
  if (pick < 94) return -r.below(4) - 1;
  return INT64_MAX - r.below(3);
}

std::int64_t stride(Rng& r, std::int64_t contiguous) {
  const std::int64_t pick = r.below(100);
  if (pick < 60) return contiguous;
  if (pick < 75) return r.below(8) - 2;  // transposes, zero (broadcast) and negative strides
  std::int64_t scaled = 0;
  if (pick < 90 && !__builtin_mul_overflow(contiguous, 1 + r.below(3), &scaled)) return scaled;
  const std::int64_t big = std::int64_t{1} << r.below(63);
  return r.chance(50) ? big : -big;
}

constexpr std::size_t kBuffer = 1 << 16;
alignas(256) unsigned char g_buffer[kBuffer];

struct Probe {
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
  bool released = false;
};

DLDataType random_dtype(Rng& r) {
  static const DLDataType valid[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1},
                                     {kDLBfloat, 16, 1}, {kDLInt, 8, 1},   {kDLUInt, 8, 1},
                                     {kDLInt, 32, 1},   {kDLInt, 64, 1},   {kDLBool, 8, 1}};
  if (r.chance(85)) return valid[r.below(9)];
  return {static_cast<std::uint8_t>(r.below(256)), static_cast<std::uint8_t>(r.below(256)),
          static_cast<std::uint16_t>(r.below(4))};
}

// The extent a view of `shape`/`strides` reaches inside g_buffer, or false when it would not
// fit (the fuzz only gives ops views that really lie inside its buffer).
bool fits(const Tensor& t) {
  if (t.numel() == 0) return true;
  std::int64_t low = 0, high = 0;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.stride(i), &reach)) return false;
    if (__builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high)) return false;
  }
  // Integer arithmetic: pointers outside the buffer must not be formed.
  const auto size = static_cast<std::int64_t>(dtype_size(t.dtype));
  const auto first = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(t.data) -
                                               reinterpret_cast<std::uintptr_t>(g_buffer));
  const auto buffer = static_cast<std::int64_t>(kBuffer);
  return low >= -buffer && high <= buffer && first + low * size >= 0 &&
         first + (high + 1) * size <= buffer;
}

int g_accepted = 0, g_rejected = 0, g_ops = 0;

template <typename F>
void expect_typed(F&& body) {
  try {
    body();
    ++g_accepted;
  } catch (const Error&) {
    ++g_rejected;
  } catch (const std::bad_alloc&) {
    ++g_rejected;
  }
  // Anything else propagates and fails the run.
}

void run_ops(Rng& r, const Tensor& t) {
  if (!fits(t) || t.device.kind != DeviceKind::CPU || t.numel() > 4096) return;
  for (auto d : t.shape) {
    if (d > 4096) return;  // broadcast views of huge shapes would make huge outputs
  }
  ++g_ops;
  const PolicyChoice choice{};
  expect_typed([&] { matmul(t, t, choice, nullptr); });
  if (t.shape.size() == 2) {
    Tensor tt = t;
    tt.shape = {t.shape[1], t.shape[0]};
    tt.strides = {t.stride(1), t.stride(0)};
    expect_typed([&] { matmul(t, tt, choice, nullptr); });
    expect_typed([&] {
      linear(t, t, nullptr, static_cast<Activation>(r.below(3)), false, choice, nullptr);
    });
  }
  if (!t.shape.empty()) {
    Tensor w = t;
    w.shape = {t.shape.back()};
    w.strides = {t.stride(t.shape.size() - 1)};
    expect_typed([&] { layernorm(t, w, w, 1e-5, choice, nullptr); });
  }
}

void fuzz_dlpack(Rng& r) {
  auto* probe = new Probe();
  const int ndim = r.chance(95) ? static_cast<int>(r.below(5)) : static_cast<int>(r.below(200)) - 50;
  const int stored = std::max(0, std::min(ndim, 8));
  std::int64_t contiguous = 1;
  probe->shape.resize(static_cast<std::size_t>(stored));
  probe->strides.resize(static_cast<std::size_t>(stored));
  for (int i = stored - 1; i >= 0; --i) {
    probe->shape[i] = dimension(r);
    probe->strides[i] = stride(r, contiguous);
    std::int64_t next = 0;
    if (probe->shape[i] > 0 && !__builtin_mul_overflow(contiguous, probe->shape[i], &next)) {
      contiguous = next;
    }
  }
  DLTensor& dl = probe->managed.dl_tensor;
  dl.data = r.chance(95) ? static_cast<void*>(g_buffer + 64 * r.below(64)) : nullptr;
  static const int devices[] = {kDLCPU, kDLCPU, kDLCUDAHost, kDLCUDA, kDLOpenCL, kDLROCM, 99};
  dl.device = {static_cast<DLDeviceType>(devices[r.below(7)]),
               static_cast<std::int32_t>(r.below(4)) - (r.chance(10) ? 3 : 0)};
  dl.ndim = ndim > 8 && r.chance(50) ? stored : ndim;  // sometimes claims more than stored
  if (dl.ndim > stored) dl.ndim = r.chance(50) ? stored : dl.ndim;
  dl.dtype = random_dtype(r);
  dl.shape = stored > 0 || r.chance(50) ? probe->shape.data() : nullptr;
  if (dl.ndim > stored) dl.shape = nullptr;  // a lying ndim must come without a shape array
  dl.strides = r.chance(30) ? nullptr : probe->strides.data();
  if (dl.ndim > stored) dl.strides = nullptr;
  const std::int64_t off = r.below(100);
  dl.byte_offset = off < 80 ? 0 : off < 90 ? static_cast<std::uint64_t>(r.below(512))
                                            : ~std::uint64_t{0} - static_cast<std::uint64_t>(r.below(4));
  probe->managed.manager_ctx = probe;
  probe->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Probe*>(m->manager_ctx); };
  try {
    Tensor t = tensor_from_dlpack(&probe->managed);
    ++g_accepted;
    run_ops(r, t);
    DLManagedTensor* out = tensor_to_dlpack(t);
    out->deleter(out);
  } catch (const Error&) {
    ++g_rejected;
  }
}

void fuzz_empty(Rng& r) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(r.below(4)));
  for (auto& d : shape) d = dimension(r);
  const DType dtype = static_cast<DType>(r.below(9));
  const DeviceRef device = r.chance(85) ? DeviceRef{DeviceKind::CPU, 0}
                                        : DeviceRef{DeviceKind::CUDA, static_cast<int>(r.below(3))};
  expect_typed([&] {
    Tensor t = Tensor::empty(shape, dtype, device);
    if (t.nbytes() <= kBuffer) std::memset(t.data, 0, t.nbytes());  // touch what it claims
  });
}
}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 2000;
  Rng r{argc > 2 ? std::strtoull(argv[2], nullptr, 10) | 1 : 0x9e3779b97f4a7c15ULL};
  for (long i = 0; i < iterations; ++i) {
    if (r.chance(70)) {
      fuzz_dlpack(r);
    } else {
      fuzz_empty(r);
    }
  }
  std::printf("fuzz_tensor: %ld iterations, %d accepted, %d typed errors, %d views through ops\n",
              iterations, g_accepted, g_rejected, g_ops);
  return 0;
}
