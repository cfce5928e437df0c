// LayerNorm/RMSNorm: the CPU reference against finite differences, the CUDA kernels against
// the CPU reference over every launch shape (vectorised and generic paths, residual form,
// optional weight/bias/dsum, misaligned views, persistent loops). Also the driver of
// compute-sanitizer (packages/xpuruntime-core/scripts/norm_sanitize.sh); set
// XPURUNTIME_NORM_CHECK_QUICK=1 for the shorter grid used under racecheck.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "xpuruntime/device.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"

#if XPURUNTIME_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#endif

using namespace xrt;

namespace {
const DeviceRef kCpu{DeviceKind::CPU, 0};

std::vector<double> random_values(std::size_t n, unsigned seed, double scale, double offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng) * scale + offset;
  return v;
}

// Loss = sum(dy * y) + sum(ds * s) of the float64 CPU forward, for finite differences.
double loss(NormKind kind, std::int64_t rows, std::int64_t h, std::vector<double> x,
            const std::vector<double>* residual, const std::vector<double>& w,
            const std::vector<double>& b, const std::vector<double>& dy,
            const std::vector<double>& ds) {
  std::vector<double> y(x.size()), s(x.size());
  NormForwardArgs a;
  a.kind = kind;
  a.dtype = DType::F64;
  a.rows = rows;
  a.h = h;
  a.x = x.data();
  a.residual = residual != nullptr ? residual->data() : nullptr;
  a.weight = w.data();
  a.bias = kind == NormKind::LayerNorm ? b.data() : nullptr;
  a.y = y.data();
  a.sum = residual != nullptr ? s.data() : nullptr;
  a.eps = 1e-5;
  run_norm_forward(a, kCpu, nullptr);
  double total = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    total += dy[i] * y[i] + (residual != nullptr ? ds[i] * s[i] : 0.0);
  }
  return total;
}
}  // namespace

XRT_TEST(cpu_reference_gradients_match_finite_differences) {
  const std::int64_t rows = 3, h = 5;
  const std::size_t n = rows * h;
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm}) {
    for (bool with_residual : {false, true}) {
      auto x = random_values(n, 1, 1.0, 0.5), r = random_values(n, 2, 1.0, 0.0);
      auto w = random_values(h, 3, 0.5, 1.0), b = random_values(h, 4, 0.5, 0.0);
      auto dy = random_values(n, 5, 1.0, 0.0), ds = random_values(n, 6, 1.0, 0.0);
      const std::vector<double>* res = with_residual ? &r : nullptr;
      // Analytic: forward with stats, backward on the sum.
      std::vector<double> y(n), s(n), mean(rows), rstd(rows), dx(n), dw(h), db(h);
      NormForwardArgs f;
      f.kind = kind;
      f.dtype = DType::F64;
      f.rows = rows;
      f.h = h;
      f.x = x.data();
      f.residual = with_residual ? r.data() : nullptr;
      f.weight = w.data();
      f.bias = kind == NormKind::LayerNorm ? b.data() : nullptr;
      f.y = y.data();
      f.sum = with_residual ? s.data() : nullptr;
      f.mean = mean.data();
      f.rstd = rstd.data();
      run_norm_forward(f, kCpu, nullptr);
      NormBackwardArgs g;
      g.kind = kind;
      g.dtype = DType::F64;
      g.rows = rows;
      g.h = h;
      g.dy = dy.data();
      g.x = with_residual ? s.data() : x.data();
      g.weight = w.data();
      g.mean = mean.data();
      g.rstd = rstd.data();
      g.dsum = with_residual ? ds.data() : nullptr;
      g.dx = dx.data();
      g.dweight = dw.data();
      g.dbias = kind == NormKind::LayerNorm ? db.data() : nullptr;
      run_norm_backward(g, kCpu, nullptr);
      const double step = 1e-6;
      double worst = 0;
      auto numeric = [&](std::vector<double>& v, std::size_t i) {
        const double keep = v[i];
        v[i] = keep + step;
        const double up = loss(kind, rows, h, x, res, w, b, dy, ds);
        v[i] = keep - step;
        const double down = loss(kind, rows, h, x, res, w, b, dy, ds);
        v[i] = keep;
        return (up - down) / (2 * step);
      };
      for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(numeric(x, i) - dx[i]));
      for (std::size_t i = 0; i < n && with_residual; ++i) {
        worst = std::max(worst, std::abs(numeric(r, i) - dx[i]));
      }
      for (std::int64_t i = 0; i < h; ++i) {
        worst = std::max(worst, std::abs(numeric(w, i) - dw[i]));
        if (kind == NormKind::LayerNorm) worst = std::max(worst, std::abs(numeric(b, i) - db[i]));
      }
      std::printf("  %s residual=%d: max |analytic - numeric| %.2e\n",
                  norm_op_name(kind, false), with_residual, worst);
      CHECK(worst < 1e-6);
    }
  }
}

XRT_TEST(norm_ops_explain_bad_arguments) {
  Tensor x = Tensor::empty({2, 4}, DType::F32, kCpu);
  Tensor w = Tensor::empty({3}, DType::F32, kCpu);
  Tensor b = Tensor::empty({4}, DType::F32, kCpu);
  Tensor d = Tensor::empty({4}, DType::F64, kCpu);
  CHECK_THROWS(InvalidArgumentError,
               norm_forward(NormKind::LayerNorm, x, nullptr, &w, nullptr, 1e-5, true, {}, nullptr),
               "weight must have shape [4]");
  CHECK_THROWS(InvalidArgumentError,
               norm_forward(NormKind::RMSNorm, x, nullptr, nullptr, &b, 1e-5, true, {}, nullptr),
               "rmsnorm takes no bias");
  CHECK_THROWS(InvalidArgumentError,
               norm_forward(NormKind::LayerNorm, x, nullptr, &d, nullptr, 1e-5, true, {}, nullptr),
               "weight is float64 but x is float32");
  CHECK_THROWS(InvalidArgumentError,
               norm_forward(NormKind::LayerNorm, x, nullptr, nullptr, nullptr, -1.0, true, {}, nullptr),
               "eps must be a finite number >= 0");
  const NormForwardResult f =
      norm_forward(NormKind::LayerNorm, x, nullptr, nullptr, nullptr, 1e-5, true, {}, nullptr);
  CHECK(f.decision->kernel == "xrt");
  CHECK(f.mean.shape == std::vector<std::int64_t>{2});
  CHECK_THROWS(InvalidArgumentError,
               norm_backward(NormKind::LayerNorm, x, x, nullptr, nullptr, f.rstd, nullptr, false,
                             {}, nullptr),
               "needs the mean");
  CHECK_THROWS(InvalidArgumentError,
               norm_backward(NormKind::LayerNorm, x, x, nullptr, &f.rstd, x, nullptr, false, {},
                             nullptr),
               "rstd must have shape [2]");
  CHECK_THROWS(UnsupportedOperationError,
               norm_forward(NormKind::RMSNorm, x, nullptr, nullptr, nullptr, 1e-5, false,
                            {"cublas", Mode::Pin, Strategy::FirstSupported}, nullptr),
               "unknown kernel 'cublas'");
}

#if XPURUNTIME_WITH_CUDA
namespace {
bool have_gpu() {
  if (DeviceManager::instance().cuda_device_count() > 0) return true;
  std::printf("  skipped: %s\n", DeviceManager::instance().cuda_unavailable_reason().c_str());
  return false;
}

// Host values of `dtype` (rounded through it), stored as the dtype's bits or as floats.
float round_to(DType dtype, float v) {
  if (dtype == DType::F16) return __half2float(__float2half_rn(v));
  if (dtype == DType::BF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

std::vector<unsigned char> encode(DType dtype, const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else if (dtype == DType::F16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(DType dtype, const std::vector<unsigned char>& bytes) {
  const std::size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else if (dtype == DType::F16) {
      __half h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = __half2float(h);
    } else {
      __nv_bfloat16 h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = __bfloat162float(h);
    }
  }
  return out;
}

// A device buffer of `count` elements starting `misalign` elements past a 256-byte boundary.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, std::size_t count, int misalign)
      : size_(dtype_size(dtype)), offset_(misalign * dtype_size(dtype)) {
    const std::size_t bytes = count * size_ + offset_ + 16;
    cudaMalloc(&base_, bytes);
    cudaMemset(base_, 0, bytes);  // initcheck: every byte read back has been written
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return static_cast<char*>(base_) + offset_; }
  void upload(const std::vector<unsigned char>& bytes) {
    cudaMemcpy(data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  }
  std::vector<unsigned char> download(std::size_t count) const {
    std::vector<unsigned char> bytes(count * size_);
    cudaMemcpy(bytes.data(), data(), bytes.size(), cudaMemcpyDeviceToHost);
    return bytes;
  }

 private:
  void* base_ = nullptr;
  std::size_t size_;
  std::size_t offset_;
};

struct Case {
  NormKind kind;
  DType dtype;
  std::int64_t rows, h;
  bool residual, weight, bias, dsum;
  int misalign;  // elements
};

double rtol_of(DType dtype) {
  return dtype == DType::F32 ? 2e-5 : dtype == DType::F16 ? 2e-3 : 1.6e-2;
}

double rms(const std::vector<float>& values) {
  double square = 0;
  for (float v : values) square += double(v) * v;
  return values.empty() ? 0.0 : std::sqrt(square / values.size());
}

// |got - want| <= rtol * (|want| + scale) everywhere, scale = max(rms(want), floor); returns
// the worst ratio. `floor` is the size of the terms `want` is a difference of: dx is
// rstd * (dy * w - x * rstd^2 * mean(dy * w * x)) (RMSNorm), whose terms cancel when h is
// tiny (h = 1: dx = rstd * dy * eps / (x^2 + eps)); rounding is relative to the terms.
double worst_error(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                   double floor = 0.0) {
  const double scale = std::max(rms(want), floor) + 1e-12;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double allowed = rtol * (std::abs(want[i]) + scale);
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / allowed);
  }
  return worst;
}

std::vector<float> rounded_values(DType dtype, std::size_t n, unsigned seed, double scale,
                                  double offset) {
  const auto v = random_values(n, seed, scale, offset);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = round_to(dtype, static_cast<float>(v[i]));
  return out;
}

// Runs one case on the GPU and on the CPU reference (float32 inputs holding the rounded
// values; the residual sum rounded as the GPU rounds it); returns false on a mismatch.
bool check_case(const Case& c) {
  const std::size_t n = static_cast<std::size_t>(c.rows * c.h), h = static_cast<std::size_t>(c.h);
  const bool ln = c.kind == NormKind::LayerNorm;
  const auto x = rounded_values(c.dtype, n, 11, 2.0, 0.5);
  const auto r = rounded_values(c.dtype, n, 12, 1.0, 0.0);
  const auto w = rounded_values(c.dtype, h, 13, 0.3, 1.0);
  const auto b = rounded_values(c.dtype, h, 14, 0.5, 0.0);
  const auto dy = rounded_values(c.dtype, n, 15, 1.0, 0.0);
  const auto ds = rounded_values(c.dtype, n, 16, 1.0, 0.0);
  const bool with_bias = ln && c.bias;
  std::vector<float> s = x;
  if (c.residual) {
    for (std::size_t i = 0; i < n; ++i) s[i] = round_to(c.dtype, x[i] + r[i]);
  }

  // Reference (float32 storage, float64 accumulation).
  std::vector<float> y_ref(n), mean_ref(c.rows), rstd_ref(c.rows), dx_ref(n), dw_ref(h), db_ref(h);
  NormForwardArgs f;
  f.kind = c.kind;
  f.dtype = DType::F32;
  f.rows = c.rows;
  f.h = c.h;
  f.x = s.data();
  f.weight = c.weight ? w.data() : nullptr;
  f.bias = with_bias ? b.data() : nullptr;
  f.y = y_ref.data();
  f.mean = ln ? mean_ref.data() : nullptr;
  f.rstd = rstd_ref.data();
  f.eps = 1e-5;
  run_norm_forward(f, kCpu, nullptr);
  NormBackwardArgs g;
  g.kind = c.kind;
  g.dtype = DType::F32;
  g.rows = c.rows;
  g.h = c.h;
  g.dy = dy.data();
  g.x = s.data();
  g.weight = f.weight;
  g.mean = f.mean;
  g.rstd = rstd_ref.data();
  g.dsum = c.dsum ? ds.data() : nullptr;
  g.dx = dx_ref.data();
  g.dweight = c.weight ? dw_ref.data() : nullptr;
  g.dbias = with_bias ? db_ref.data() : nullptr;
  run_norm_backward(g, kCpu, nullptr);

  // GPU.
  DeviceBuffer dx_in(c.dtype, n, c.misalign), dr(c.dtype, n, c.misalign), dw(c.dtype, h, 0),
      db(c.dtype, h, 0), dyb(c.dtype, n, c.misalign), dsb(c.dtype, n, c.misalign),
      yb(c.dtype, n, c.misalign), sb(c.dtype, n, c.misalign), dxb(c.dtype, n, c.misalign),
      dwb(c.dtype, h, 0), dbb(c.dtype, h, 0);
  DeviceBuffer stats(DType::F32, 2 * static_cast<std::size_t>(c.rows), 0);
  dx_in.upload(encode(c.dtype, x));
  dr.upload(encode(c.dtype, r));
  dw.upload(encode(c.dtype, w));
  db.upload(encode(c.dtype, b));
  dyb.upload(encode(c.dtype, dy));
  dsb.upload(encode(c.dtype, ds));
  float* mean_d = static_cast<float*>(stats.data());
  float* rstd_d = mean_d + c.rows;
  NormForwardArgs fd = f;
  fd.dtype = c.dtype;
  fd.x = dx_in.data();
  fd.residual = c.residual ? dr.data() : nullptr;
  fd.weight = c.weight ? dw.data() : nullptr;
  fd.bias = with_bias ? db.data() : nullptr;
  fd.y = yb.data();
  fd.sum = c.residual ? sb.data() : nullptr;
  fd.mean = ln ? mean_d : nullptr;
  fd.rstd = rstd_d;
  const NormLaunch forward_launch = run_norm_forward(fd, {DeviceKind::CUDA, 0}, nullptr);
  NormBackwardArgs gd = g;
  gd.dtype = c.dtype;
  gd.dy = dyb.data();
  gd.x = c.residual ? sb.data() : dx_in.data();
  gd.weight = fd.weight;
  gd.mean = fd.mean;
  gd.rstd = rstd_d;
  gd.dsum = c.dsum ? dsb.data() : nullptr;
  gd.dx = dxb.data();
  gd.dweight = c.weight ? dwb.data() : nullptr;
  gd.dbias = with_bias ? dbb.data() : nullptr;
  const NormLaunch backward_launch = run_norm_backward(gd, {DeviceKind::CUDA, 0}, nullptr);
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    std::printf("  CUDA error %s\n", cudaGetErrorString(status));
    return false;
  }

  const double rtol = rtol_of(c.dtype);
  double worst = worst_error(decode(c.dtype, yb.download(n)), y_ref, rtol);
  if (c.residual) worst = std::max(worst, worst_error(decode(c.dtype, sb.download(n)), s, 1e-7));
  const auto stats_host = decode(DType::F32, stats.download(2 * c.rows));
  const std::vector<float> rstd_got(stats_host.begin() + c.rows, stats_host.end());
  worst = std::max(worst, worst_error(rstd_got, rstd_ref, 1e-5));
  if (ln) {
    const std::vector<float> mean_got(stats_host.begin(), stats_host.begin() + c.rows);
    worst = std::max(worst, worst_error(mean_got, mean_ref, 1e-5));
  }
  std::vector<float> dx_terms(n);  // rstd * dy * w: the terms dx's formula subtracts
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t row = i / static_cast<std::size_t>(h), col = i % static_cast<std::size_t>(h);
    dx_terms[i] = rstd_ref[row] * dy[i] * (c.weight ? w[col] : 1.0f);
  }
  worst = std::max(worst, worst_error(decode(c.dtype, dxb.download(n)), dx_ref, rtol,
                                      rms(dx_terms)));
  if (c.weight) {
    worst = std::max(worst, worst_error(decode(c.dtype, dwb.download(h)), dw_ref, rtol));
  }
  if (with_bias) worst = std::max(worst, worst_error(decode(c.dtype, dbb.download(h)), db_ref, rtol));
  const bool ok = worst <= 1.0;
  if (!ok || std::getenv("XPURUNTIME_NORM_CHECK_VERBOSE") != nullptr) {
    std::printf("  %s %s rows=%lld h=%lld residual=%d weight=%d bias=%d dsum=%d misalign=%d: "
                "worst error/tolerance %.3f [fwd %s] [bwd %s]\n",
                norm_op_name(c.kind, false), dtype_name(c.dtype), static_cast<long long>(c.rows),
                static_cast<long long>(c.h), c.residual, c.weight, with_bias, c.dsum, c.misalign,
                worst, describe(forward_launch).c_str(), describe(backward_launch).c_str());
  }
  return ok;
}
}  // namespace

XRT_TEST(cuda_norms_match_the_cpu_reference) {
  if (!have_gpu()) return;
  const bool quick = std::getenv("XPURUNTIME_NORM_CHECK_QUICK") != nullptr;
  // Widths through every launch shape: one warp per row (1..8 vectors per thread), several
  // warps, the largest vectorised rows of each direction, and the generic path (widths
  // that are no multiple of the vector, and rows too long to vectorise).
  const std::vector<std::int64_t> widths =
      quick ? std::vector<std::int64_t>{7, 64, 1000, 4096, 16384, 40000}
            : std::vector<std::int64_t>{1, 8, 40, 256, 1000, 1024, 2048, 4100, 8192,
                                        12288, 16384, 20480, 40000};
  int cases = 0, failed = 0;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm}) {
      for (std::int64_t h : widths) {
        const std::int64_t many = std::max<std::int64_t>(2, (quick ? 1 << 17 : 1 << 21) / h);
        const Case variants[] = {
            {kind, dtype, 3, h, false, true, true, false, 0},
            {kind, dtype, std::min<std::int64_t>(many, 67), h, true, true, false, true, 0},
            {kind, dtype, 1, h, false, false, false, false, 1},  // misaligned: generic path
            {kind, dtype, many, h, true, true, true, true, 0},   // persistent loops
        };
        for (const Case& c : variants) {
          ++cases;
          if (!check_case(c)) ++failed;
        }
      }
    }
  }
  std::printf("  %d cases, %d failed\n", cases, failed);
  CHECK(failed == 0);
}

XRT_TEST(cuda_dweight_is_deterministic) {
  if (!have_gpu()) return;
  const std::int64_t rows = 4096, h = 1024;
  const auto x = rounded_values(DType::BF16, rows * h, 21, 1.0, 0.0);
  const auto dy = rounded_values(DType::BF16, rows * h, 22, 1.0, 0.0);
  DeviceBuffer xb(DType::BF16, rows * h, 0), dyb(DType::BF16, rows * h, 0), yb(DType::BF16, rows * h, 0),
      dxb(DType::BF16, rows * h, 0), dw1(DType::BF16, h, 0), dw2(DType::BF16, h, 0);
  DeviceBuffer stats(DType::F32, rows, 0);
  xb.upload(encode(DType::BF16, x));
  dyb.upload(encode(DType::BF16, dy));
  NormForwardArgs f;
  f.kind = NormKind::RMSNorm;
  f.dtype = DType::BF16;
  f.rows = rows;
  f.h = h;
  f.x = xb.data();
  f.y = yb.data();
  f.rstd = stats.data();
  run_norm_forward(f, {DeviceKind::CUDA, 0}, nullptr);
  NormBackwardArgs g;
  g.kind = NormKind::RMSNorm;
  g.dtype = DType::BF16;
  g.rows = rows;
  g.h = h;
  g.dy = dyb.data();
  g.x = xb.data();
  g.rstd = stats.data();
  g.dx = dxb.data();
  for (DeviceBuffer* out : {&dw1, &dw2}) {
    g.dweight = out->data();
    run_norm_backward(g, {DeviceKind::CUDA, 0}, nullptr);
  }
  CHECK(dw1.download(h) == dw2.download(h));
}
#endif

XRT_TEST_MAIN()
