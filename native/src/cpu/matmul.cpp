// Reference CPU GEMM for the matmul and linear ops: any strides (operands that are not
// row-major are packed first), batches, and every epilogue of gemm.h. Row-major inner loops
// blocked over k for cache reuse, rows split across threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "builtin_kernels.h"
#include "gemm.h"
#include "xpuruntime/errors.h"

namespace xrt {

namespace {
template <typename T>
void matmul_rows(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                 std::int64_t row_begin, std::int64_t row_end, std::int64_t k, std::int64_t n) {
  constexpr std::int64_t kBlock = 256;
  for (std::int64_t i = row_begin; i < row_end; ++i) std::fill(c + i * n, c + (i + 1) * n, T(0));
  for (std::int64_t k0 = 0; k0 < k; k0 += kBlock) {
    const std::int64_t k1 = std::min(k, k0 + kBlock);
    for (std::int64_t i = row_begin; i < row_end; ++i) {
      T* ci = c + i * n;
      for (std::int64_t kk = k0; kk < k1; ++kk) {
        const T aik = a[i * lda + kk];
        const T* bk = b + kk * ldb;
        for (std::int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
      }
    }
  }
}

template <typename T>
void matmul_threads(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                    std::int64_t m, std::int64_t k, std::int64_t n) {
  const auto hw = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  // Threads pay off only when each gets a few million multiply-adds.
  const double work = static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  const std::int64_t threads =
      std::min<std::int64_t>({hw, m, std::max<std::int64_t>(1, static_cast<std::int64_t>(work / (1 << 21)))});
  if (threads <= 1) {
    matmul_rows(a, lda, b, ldb, c, 0, m, k, n);
    return;
  }
  std::vector<std::thread> pool;
  const std::int64_t chunk = (m + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t r0 = t * chunk, r1 = std::min(m, r0 + chunk);
    if (r0 < r1) pool.emplace_back(matmul_rows<T>, a, lda, b, ldb, c, r0, r1, k, n);
  }
  for (auto& th : pool) th.join();
}

// Row-major [rows, cols] copy of a strided operand, or nullptr when it is row-major already.
template <typename T>
const T* row_major(const GemmOperand& o, const T* base, std::vector<T>& scratch,
                   std::int64_t& ld) {
  if (o.layout == OperandLayout::RowMajor) {
    ld = o.ld();
    return base;
  }
  scratch.resize(static_cast<std::size_t>(o.rows * o.cols));
  for (std::int64_t r = 0; r < o.rows; ++r) {
    for (std::int64_t c = 0; c < o.cols; ++c) {
      scratch[static_cast<std::size_t>(r * o.cols + c)] = base[r * o.row_stride + c * o.col_stride];
    }
  }
  ld = o.cols;
  return scratch.data();
}

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <typename T>
T gelu(T x) {
  const double v = static_cast<double>(x);
  return static_cast<T>(0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
}

template <typename T>
T gelu_derivative(T x) {
  const double v = static_cast<double>(x);
  const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
  return static_cast<T>(0.5 * (1.0 + t) +
                        0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v));
}

template <typename T>
void gemm_cpu(const GemmProblem& p) {
  const Epilogue e = p.epilogue;
  std::vector<T> sa, sb;
  std::vector<double> grad(static_cast<std::size_t>(epilogue_has_bias_grad(e) ? bias_grad_length(p) : 0), 0.0);
  for (std::int64_t bi = 0; bi < p.batch; ++bi) {
    // An empty operand may carry any strides: form no pointer from them.
    const bool a_empty = p.m == 0 || p.k == 0, b_empty = p.k == 0 || p.n == 0;
    const T* a_base = static_cast<const T*>(p.a.data) + (a_empty ? 0 : bi * p.a.batch_stride);
    const T* b_base = static_cast<const T*>(p.b.data) + (b_empty ? 0 : bi * p.b.batch_stride);
    T* c = static_cast<T*>(p.c) + bi * p.m * p.n;
    std::int64_t lda = 0, ldb = 0;
    const T* a = row_major(p.a, a_base, sa, lda);
    const T* b = row_major(p.b, b_base, sb, ldb);
    matmul_threads(a, lda, b, ldb, c, p.m, p.k, p.n);
    const T* bias = static_cast<const T*>(p.bias);
    for (std::int64_t i = 0; i < p.m; ++i) {
      T* ci = c + i * p.n;
      for (std::int64_t j = 0; j < p.n; ++j) {
        T v = ci[j];
        if (epilogue_has_bias(e)) v += bias[j];
        if (epilogue_stores_aux(e)) static_cast<T*>(p.aux_out)[i * p.aux_ld + j] = v;
        switch (e) {
          case Epilogue::Relu:
          case Epilogue::ReluBias: v = v > T(0) ? v : T(0); break;
          case Epilogue::Gelu:
          case Epilogue::GeluBias:
          case Epilogue::GeluAux:
          case Epilogue::GeluAuxBias: v = gelu(v); break;
          case Epilogue::DGelu:
          case Epilogue::DGeluBGrad:
            v *= gelu_derivative(static_cast<const T*>(p.aux_in)[i * p.aux_ld + j]);
            break;
          default: break;
        }
        ci[j] = v;
        if (e == Epilogue::DGeluBGrad) grad[static_cast<std::size_t>(j)] += static_cast<double>(v);
      }
      if (e == Epilogue::BGradB) {
        double s = 0;
        for (std::int64_t kk = 0; kk < p.k; ++kk) s += static_cast<double>(a[i * lda + kk]);
        grad[static_cast<std::size_t>(i)] += s;
      }
    }
    if (e == Epilogue::BGradA) {
      for (std::int64_t kk = 0; kk < p.k; ++kk) {
        for (std::int64_t j = 0; j < p.n; ++j) {
          grad[static_cast<std::size_t>(j)] += static_cast<double>(b[kk * ldb + j]);
        }
      }
    }
  }
  for (std::size_t i = 0; i < grad.size(); ++i) static_cast<T*>(p.bias_grad)[i] = static_cast<T>(grad[i]);
}

std::string cpu_gemm_unsupported(const OpQuery& q) {
  if (q.device.kind != DeviceKind::CPU) return "runs on the CPU only, inputs are on " + q.device.str();
  if (q.dtype != DType::F32 && q.dtype != DType::F64) {
    return std::string("computes float32/float64 only, got ") + dtype_name(q.dtype);
  }
  return "";
}

std::string run_cpu_gemm(const KernelCall& call) {
  const GemmProblem p = gemm_problem(call, call.variant);
  if (p.dtype == DType::F32) {
    gemm_cpu<float>(p);
  } else {
    gemm_cpu<double>(p);
  }
  return "";
}

KernelDef cpu_gemm_kernel(const char* op) {
  KernelDef def;
  def.op = op;
  def.name = "cpu";
  def.library = "xpuruntime CPU reference";
  def.unsupported_reason = cpu_gemm_unsupported;
  def.run = run_cpu_gemm;
  def.measure = [](const OpQuery& q) {
    const DeviceRef cpu{DeviceKind::CPU, 0};
    const bool batched = q.shape.size() == 4;
    const std::int64_t b = batched ? q.shape[0] : 1, m = q.shape[batched], k = q.shape[batched + 1],
                       n = q.shape[batched + 2];
    Tensor a = Tensor::empty({b, m, k}, q.dtype, cpu);
    Tensor bt = Tensor::empty({b, k, n}, q.dtype, cpu);
    Tensor c = Tensor::empty({b, m, n}, q.dtype, cpu);
    std::memset(a.data, 0, a.nbytes());
    std::memset(bt.data, 0, bt.nbytes());
    KernelCall call{{&a, &bt}, {}, &c, nullptr};
    call.variant = q.variant & (layout::kGemm | layout::kTf32);  // timed without the epilogue
    return median_host_ms(3, [&] { run_cpu_gemm(call); });
  };
  return def;
}
}  // namespace

KernelDef cpu_matmul_kernel() { return cpu_gemm_kernel("matmul"); }
KernelDef cpu_linear_kernel() { return cpu_gemm_kernel("linear"); }

template <typename T>
void activation_grad_cpu(const T* dy, const T* saved, std::int64_t saved_ld, T* dz,
                         std::int64_t rows, std::int64_t n, bool gelu_grad) {
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const T s = saved[i * saved_ld + j];
      const T g = dy[i * n + j];
      dz[i * n + j] = gelu_grad ? g * gelu_derivative(s) : (s > T(0) ? g : T(0));
    }
  }
}

void cpu_activation_grad(const Tensor& dy, const Tensor& saved, std::int64_t saved_ld, Tensor& dz,
                         bool gelu_grad) {
  if (dy.dtype != DType::F32 && dy.dtype != DType::F64) {
    throw UnsupportedOperationError(std::string("activation gradient on the CPU computes "
                                                "float32/float64 only, got ") +
                                    dtype_name(dy.dtype));
  }
  const std::int64_t n = dy.shape.empty() ? 1 : dy.shape.back();
  const std::int64_t rows = n == 0 ? 0 : dy.numel() / n;
  if (dy.dtype == DType::F32) {
    activation_grad_cpu(static_cast<const float*>(dy.data), static_cast<const float*>(saved.data),
                        saved_ld, static_cast<float*>(dz.data), rows, n, gelu_grad);
  } else {
    activation_grad_cpu(static_cast<const double*>(dy.data), static_cast<const double*>(saved.data),
                        saved_ld, static_cast<double*>(dz.data), rows, n, gelu_grad);
  }
}

}  // namespace xrt
