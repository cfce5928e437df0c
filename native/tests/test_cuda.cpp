// CUDA paths; each test notes "skipped" and passes when no device is present (the CUDA build
// must still work CPU-only there).
#include <cmath>

#include "check.h"
#include "xpuruntime/device.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/fingerprint.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/ops.h"
#include "xpuruntime/stream.h"

#if XPURUNTIME_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace xrt;

namespace {
bool have_gpu() {
  if (DeviceManager::instance().cuda_device_count() > 0) return true;
  std::printf("  skipped: %s\n", DeviceManager::instance().cuda_unavailable_reason().c_str());
  return false;
}
}  // namespace

XRT_TEST(environment_is_reported_without_a_gpu_too) {
  const NativeEnvironment env = native_environment();
  CHECK(env.cuda_built == (XPURUNTIME_WITH_CUDA != 0));
  CHECK(static_cast<int>(env.gpus.size()) == DeviceManager::instance().cuda_device_count());
}

#if XPURUNTIME_WITH_CUDA
XRT_TEST(matmul_kernels_agree_with_cpu_reference) {
  if (!have_gpu()) return;
  const std::int64_t m = 33, k = 65, n = 17;
  Tensor a = Tensor::empty({m, k}, DType::F32, {DeviceKind::CPU, 0});
  Tensor b = Tensor::empty({k, n}, DType::F32, {DeviceKind::CPU, 0});
  for (std::int64_t i = 0; i < a.numel(); ++i) static_cast<float*>(a.data)[i] = std::sin(float(i));
  for (std::int64_t i = 0; i < b.numel(); ++i) static_cast<float*>(b.data)[i] = std::cos(float(i));
  const Tensor ref = matmul(a, b, {}, nullptr).output;
  const DeviceRef gpu{DeviceKind::CUDA, 0};
  Tensor da = Tensor::empty(a.shape, DType::F32, gpu), db = Tensor::empty(b.shape, DType::F32, gpu);
  cudaMemcpy(da.data, a.data, a.nbytes(), cudaMemcpyHostToDevice);
  cudaMemcpy(db.data, b.data, b.nbytes(), cudaMemcpyHostToDevice);
  for (const char* kernel : {"cublasLt", "cublas"}) {
    OpResult r = matmul(da, db, {kernel, Mode::Pin, Strategy::FirstSupported}, nullptr);
    std::vector<float> host(static_cast<std::size_t>(m * n));
    cudaMemcpy(host.data(), r.output.data, r.output.nbytes(), cudaMemcpyDeviceToHost);
    double worst = 0;
    for (std::size_t i = 0; i < host.size(); ++i) {
      worst = std::max(worst, double(std::abs(host[i] - static_cast<const float*>(ref.data)[i])));
    }
    std::printf("  %s max |diff| %.2e (%s)\n", kernel, worst, r.detail.c_str());
    CHECK(worst < 1e-3);
  }
}

XRT_TEST(xrt_layernorm_on_cuda_agrees_with_cpu_reference) {
  if (!have_gpu()) return;
  const DeviceRef cpu{DeviceKind::CPU, 0}, gpu{DeviceKind::CUDA, 0};
  const std::int64_t rows = 7, d = 1000;
  Tensor x = Tensor::empty({rows, d}, DType::F32, cpu);
  Tensor w = Tensor::empty({d}, DType::F32, cpu), b = Tensor::empty({d}, DType::F32, cpu);
  for (std::int64_t i = 0; i < x.numel(); ++i) static_cast<float*>(x.data)[i] = std::sin(0.1f * i) + 3;
  for (std::int64_t i = 0; i < d; ++i) {
    static_cast<float*>(w.data)[i] = 1.0f + 0.001f * i;
    static_cast<float*>(b.data)[i] = 0.5f;
  }
  const Tensor ref = layernorm(x, w, b, 1e-5, {"cpu", Mode::Pin, Strategy::FirstSupported}, nullptr).output;
  Tensor dx = Tensor::empty(x.shape, DType::F32, gpu), dw = Tensor::empty(w.shape, DType::F32, gpu),
         db = Tensor::empty(b.shape, DType::F32, gpu);
  cudaMemcpy(dx.data, x.data, x.nbytes(), cudaMemcpyHostToDevice);
  cudaMemcpy(dw.data, w.data, w.nbytes(), cudaMemcpyHostToDevice);
  cudaMemcpy(db.data, b.data, b.nbytes(), cudaMemcpyHostToDevice);
  OpResult r = layernorm(dx, dw, db, 1e-5, {"xrt", Mode::Pin, Strategy::FirstSupported}, nullptr);
  std::vector<float> host(static_cast<std::size_t>(x.numel()));
  cudaMemcpy(host.data(), r.output.data, r.output.nbytes(), cudaMemcpyDeviceToHost);
  double worst = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    worst = std::max(worst, double(std::abs(host[i] - static_cast<const float*>(ref.data)[i])));
  }
  std::printf("  layernorm max |diff| %.2e\n", worst);
  CHECK(worst < 1e-4);
}

XRT_TEST(graph_replay_reruns_captured_work) {
  if (!have_gpu()) return;
  Stream stream(0);
  const DeviceRef gpu{DeviceKind::CUDA, 0};
  Tensor x = Tensor::empty({256}, DType::F32, gpu, stream.handle());
  std::vector<float> ones(256, 1.0f), twos(256, 2.0f), out(256);
  Graph g;
  g.begin(stream.handle());
  cudaMemcpyAsync(x.data, twos.data(), 1024, cudaMemcpyHostToDevice,
                  static_cast<cudaStream_t>(stream.handle()));
  g.end();
  cudaMemcpy(x.data, ones.data(), 1024, cudaMemcpyHostToDevice);
  g.replay(nullptr);
  stream.synchronize();
  cudaMemcpy(out.data(), x.data, 1024, cudaMemcpyDeviceToHost);
  CHECK(out[0] == 2.0f && out[255] == 2.0f && g.replays() == 1);
}

XRT_TEST(oom_reports_requested_and_free_bytes) {
  if (!have_gpu()) return;
  const std::size_t huge = std::size_t(1) << 50;  // 1 PiB
  bool thrown = false;
  try {
    CachingAllocator::instance().allocate(huge, 0, nullptr);
  } catch (const OutOfMemoryError& e) {
    thrown = e.requested_bytes == huge && e.free_bytes > 0 &&
             std::string(e.what()).find("bytes are free") != std::string::npos;
  }
  CHECK(thrown);
}
#endif

XRT_TEST_MAIN()
