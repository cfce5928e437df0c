// Reference CPU matmul: row-major, blocked over k for cache reuse, rows split across threads.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "builtin_kernels.h"
#include "xpuruntime/errors.h"

namespace xrt {

namespace {
template <typename T>
void matmul_rows(const T* a, const T* b, T* c, std::int64_t row_begin, std::int64_t row_end,
                 std::int64_t k, std::int64_t n) {
  constexpr std::int64_t kBlock = 256;
  std::fill(c + row_begin * n, c + row_end * n, T(0));
  for (std::int64_t k0 = 0; k0 < k; k0 += kBlock) {
    const std::int64_t k1 = std::min(k, k0 + kBlock);
    for (std::int64_t i = row_begin; i < row_end; ++i) {
      T* ci = c + i * n;
      for (std::int64_t kk = k0; kk < k1; ++kk) {
        const T aik = a[i * k + kk];
        const T* bk = b + kk * n;
        for (std::int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
      }
    }
  }
}

template <typename T>
void matmul_cpu(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  const auto hw = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  // Threads pay off only when each gets a few million multiply-adds.
  const std::int64_t threads = std::min<std::int64_t>({hw, m, std::max<std::int64_t>(1, m * k * n / (1 << 21))});
  if (threads <= 1) {
    matmul_rows(a, b, c, 0, m, k, n);
    return;
  }
  std::vector<std::thread> pool;
  const std::int64_t chunk = (m + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t r0 = t * chunk, r1 = std::min(m, r0 + chunk);
    if (r0 < r1) pool.emplace_back(matmul_rows<T>, a, b, c, r0, r1, k, n);
  }
  for (auto& th : pool) th.join();
}

std::string cpu_matmul_unsupported(const OpQuery& q) {
  if (q.device.kind != DeviceKind::CPU) return "runs on the CPU only, inputs are on " + q.device.str();
  if (q.dtype != DType::F32 && q.dtype != DType::F64) {
    return std::string("computes float32/float64 only, got ") + dtype_name(q.dtype);
  }
  return "";
}

std::string run_cpu_matmul(const KernelCall& call) {
  const Tensor& a = *call.inputs[0];
  const Tensor& b = *call.inputs[1];
  const std::int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (a.dtype == DType::F32) {
    matmul_cpu(static_cast<const float*>(a.data), static_cast<const float*>(b.data),
               static_cast<float*>(call.output->data), m, k, n);
  } else {
    matmul_cpu(static_cast<const double*>(a.data), static_cast<const double*>(b.data),
               static_cast<double*>(call.output->data), m, k, n);
  }
  return "";
}
}  // namespace

KernelDef cpu_matmul_kernel() {
  KernelDef def;
  def.op = "matmul";
  def.name = "cpu";
  def.library = "xpuruntime CPU reference";
  def.unsupported_reason = cpu_matmul_unsupported;
  def.run = run_cpu_matmul;
  def.measure = [](const OpQuery& q) {
    const DeviceRef cpu{DeviceKind::CPU, 0};
    Tensor a = Tensor::empty({q.shape[0], q.shape[1]}, q.dtype, cpu);
    Tensor b = Tensor::empty({q.shape[1], q.shape[2]}, q.dtype, cpu);
    Tensor c = Tensor::empty({q.shape[0], q.shape[2]}, q.dtype, cpu);
    std::memset(a.data, 0, a.nbytes());
    std::memset(b.data, 0, b.nbytes());
    KernelCall call{{&a, &b}, {}, &c, nullptr, {}};
    return median_host_ms(3, [&] { run_cpu_matmul(call); });
  };
  return def;
}

}  // namespace xrt
