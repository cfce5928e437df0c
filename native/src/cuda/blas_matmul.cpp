// matmul kernels over cuBLASLt (heuristic candidates timed on first use of a shape, the
// fastest cached and recorded) and cuBLAS (cublasGemmEx, default algorithm).
//
// Tensors are row-major and cuBLAS is column-major, so C[M,N] = A[M,K] B[K,N] is computed as
// the column-major product C^T[N,M] = B^T[N,K] A^T[K,M]: no transposes, no copies.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "builtin_kernels.h"
#include "cuda/blas_loader.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/stream.h"

namespace xrt {

namespace {
constexpr std::size_t kLtWorkspaceBytes = 32u << 20;  // cuBLAS's advice for Hopper
constexpr int kLtCandidates = 8;

cudaDataType data_type(DType d) {
  switch (d) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    default: return CUDA_R_16BF;
  }
}

const char* status_name(blas::Status s) {
  switch (s) {
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

void check(blas::Status s, const char* call) {
  if (s != blas::kSuccess) {
    throw CudaError(std::string(call) + " failed: " + status_name(s) + " (" + std::to_string(s) +
                    ")");
  }
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    XRT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) XRT_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  int device_ = 0;
};

std::string cuda_matmul_unsupported(const OpQuery& q) {
  if (q.device.kind != DeviceKind::CUDA) {
    return "runs on CUDA devices only, inputs are on " + q.device.str();
  }
  if (q.dtype != DType::F32 && q.dtype != DType::F16 && q.dtype != DType::BF16) {
    return std::string("computes float32, float16 and bfloat16 only, got ") + dtype_name(q.dtype);
  }
  return "";
}

struct Dims {
  std::int64_t m, k, n;
};
Dims dims_of(const KernelCall& call) {
  return {call.inputs[0]->shape[0], call.inputs[0]->shape[1], call.inputs[1]->shape[1]};
}

// Degenerate shapes: nothing to compute, or an empty sum (zeros).
bool handle_empty(const KernelCall& call, const Dims& d) {
  if (d.m == 0 || d.n == 0) return true;
  if (d.k == 0) {
    XRT_CUDA_CHECK(cudaMemsetAsync(call.output->data, 0, call.output->nbytes(),
                                   static_cast<cudaStream_t>(call.stream)));
    return true;
  }
  return false;
}

// ---- cuBLAS ---------------------------------------------------------------------------

blas::Handle cublas_handle(int device) {
  // cuBLAS handles are not safe to share between threads that set different streams.
  thread_local std::unordered_map<int, blas::Handle> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  blas::Handle h = nullptr;
  check(BlasLibraries::probe().cublasCreate(&h), "cublasCreate");
  handles.emplace(device, h);
  return h;
}

std::string run_cublas(const KernelCall& call) {
  const BlasLibraries& libs = BlasLibraries::probe().require_cublas();
  const Dims d = dims_of(call);
  if (d.m > INT_MAX || d.n > INT_MAX || d.k > INT_MAX) {
    throw UnsupportedOperationError("cublasGemmEx takes dimensions below 2^31; use 'cublasLt'");
  }
  DeviceGuard guard(call.output->device.index);
  if (handle_empty(call, d)) return "";
  blas::Handle h = cublas_handle(call.output->device.index);
  check(libs.cublasSetStream(h, static_cast<cudaStream_t>(call.stream)), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType t = data_type(call.output->dtype);
  check(libs.cublasGemmEx(h, blas::kOpN, blas::kOpN, static_cast<int>(d.n), static_cast<int>(d.m),
                          static_cast<int>(d.k), &alpha, call.inputs[1]->data, t,
                          static_cast<int>(d.n), call.inputs[0]->data, t, static_cast<int>(d.k),
                          &beta, call.output->data, t, static_cast<int>(d.n), blas::kCompute32F,
                          blas::kGemmDefault),
        "cublasGemmEx");
  return "cublasGemmEx, CUBLAS_GEMM_DEFAULT, fp32 accumulation";
}

// ---- cuBLASLt -------------------------------------------------------------------------

struct LtPlan {
  blas::MatmulDesc desc = nullptr;
  blas::MatrixLayout a = nullptr, b = nullptr, c = nullptr;  // column-major view (B^T, A^T, C^T)
  blas::MatmulAlgo algo{};
  std::size_t workspace = 0;
  std::string detail;

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    const BlasLibraries& libs = BlasLibraries::probe();
    if (desc) libs.ltDescDestroy(desc);
    for (auto layout : {a, b, c}) {
      if (layout) libs.ltLayoutDestroy(layout);
    }
  }
};

using PlanKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, int>;

std::mutex& plans_mutex() {
  static std::mutex m;
  return m;
}
std::map<PlanKey, std::unique_ptr<LtPlan>>& plans() {
  static auto* p = new std::map<PlanKey, std::unique_ptr<LtPlan>>();  // lives to exit
  return *p;
}

blas::LtHandle lt_handle(int device) {
  static std::mutex m;
  static std::unordered_map<int, blas::LtHandle> handles;  // Lt handles are thread-safe
  std::lock_guard<std::mutex> lock(m);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  blas::LtHandle h = nullptr;
  check(BlasLibraries::probe().ltCreate(&h), "cublasLtCreate");
  handles.emplace(device, h);
  return h;
}

void lt_launch(const BlasLibraries& libs, blas::LtHandle h, const LtPlan& plan,
               const blas::MatmulAlgo& algo, const KernelCall& call, void* workspace,
               std::size_t workspace_bytes) {
  const float alpha = 1.0f, beta = 0.0f;
  check(libs.ltMatmul(h, plan.desc, &alpha, call.inputs[1]->data, plan.a, call.inputs[0]->data,
                      plan.b, &beta, call.output->data, plan.c, call.output->data, plan.c, &algo,
                      workspace, workspace_bytes, static_cast<cudaStream_t>(call.stream)),
        "cublasLtMatmul");
}

std::string describe(const BlasLibraries& libs, const blas::HeuristicResult& r) {
  std::int32_t id = 0, split_k = 0;
  std::uint32_t tile = 0, stages = 0;
  std::size_t written = 0;
  libs.ltAlgoConfigGetAttribute(&r.algo, blas::kAlgoConfigId, &id, sizeof id, &written);
  libs.ltAlgoConfigGetAttribute(&r.algo, blas::kAlgoConfigTileId, &tile, sizeof tile, &written);
  libs.ltAlgoConfigGetAttribute(&r.algo, blas::kAlgoConfigStagesId, &stages, sizeof stages,
                                &written);
  libs.ltAlgoConfigGetAttribute(&r.algo, blas::kAlgoConfigSplitK, &split_k, sizeof split_k,
                                &written);
  char buf[160];
  std::snprintf(buf, sizeof buf, "cuBLASLt algo id=%d tile=%u stages=%u splitK=%d workspace=%zu B",
                id, tile, stages, split_k, r.workspaceSize);
  return buf;
}

// Average milliseconds of `runs` launches of one algorithm, after two warm-up launches.
float time_algo(const BlasLibraries& libs, blas::LtHandle h, const LtPlan& plan,
                const blas::HeuristicResult& r, const KernelCall& call, void* workspace) {
  cudaStream_t s = static_cast<cudaStream_t>(call.stream);
  lt_launch(libs, h, plan, r.algo, call, workspace, kLtWorkspaceBytes);
  lt_launch(libs, h, plan, r.algo, call, workspace, kLtWorkspaceBytes);
  cudaEvent_t start = nullptr, stop = nullptr;
  XRT_CUDA_CHECK(cudaEventCreate(&start));
  XRT_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kRuns = 10;
  XRT_CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < kRuns; ++i) lt_launch(libs, h, plan, r.algo, call, workspace, kLtWorkspaceBytes);
  XRT_CUDA_CHECK(cudaEventRecord(stop, s));
  XRT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  XRT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kRuns;
}

// Builds the descriptors and picks the algorithm for one (device, shape, dtype).
std::unique_ptr<LtPlan> make_plan(const BlasLibraries& libs, blas::LtHandle h,
                                  const KernelCall& call, const Dims& d, void* workspace) {
  auto plan = std::make_unique<LtPlan>();
  const cudaDataType t = data_type(call.output->dtype);
  check(libs.ltDescCreate(&plan->desc, blas::kCompute32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const int op_n = blas::kOpN;
  check(libs.ltDescSetAttribute(plan->desc, blas::kDescTransA, &op_n, sizeof op_n),
        "cublasLtMatmulDescSetAttribute");
  check(libs.ltDescSetAttribute(plan->desc, blas::kDescTransB, &op_n, sizeof op_n),
        "cublasLtMatmulDescSetAttribute");
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check(libs.ltLayoutCreate(&plan->a, t, u(d.n), u(d.k), d.n), "cublasLtMatrixLayoutCreate");
  check(libs.ltLayoutCreate(&plan->b, t, u(d.k), u(d.m), d.k), "cublasLtMatrixLayoutCreate");
  check(libs.ltLayoutCreate(&plan->c, t, u(d.n), u(d.m), d.n), "cublasLtMatrixLayoutCreate");

  blas::Preference pref = nullptr;
  check(libs.ltPrefCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t max_ws = kLtWorkspaceBytes;
  check(libs.ltPrefSetAttribute(pref, blas::kPrefMaxWorkspaceBytes, &max_ws, sizeof max_ws),
        "cublasLtMatmulPreferenceSetAttribute");
  blas::HeuristicResult results[kLtCandidates] = {};
  int found = 0;
  const blas::Status hs = libs.ltGetHeuristic(h, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                              pref, kLtCandidates, results, &found);
  libs.ltPrefDestroy(pref);
  check(hs, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    throw UnsupportedOperationError("cuBLASLt offers no algorithm for this matmul");
  }
  int best = 0;
  std::string how;
  if (found == 1 || stream_is_capturing(call.stream)) {
    how = found == 1 ? "the only heuristic candidate"
                     : "heuristic #0 (not timed: the stream is being captured into a graph)";
  } else {
    // Two sweeps, each candidate's best kept: clocks ramp up during the first one.
    std::vector<float> ms(static_cast<std::size_t>(found), 1e30f);
    for (int sweep = 0; sweep < 2; ++sweep) {
      for (int i = 0; i < found; ++i) {
        ms[i] = std::min(ms[i], time_algo(libs, h, *plan, results[i], call, workspace));
      }
    }
    best = static_cast<int>(std::min_element(ms.begin(), ms.end()) - ms.begin());
    const float best_ms = ms[best], first_ms = ms[0];
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "fastest of %d heuristic candidates timed on first use (%.4f ms; heuristic "
                  "#0 %.4f ms)", found, best_ms, first_ms);
    how = buf;
  }
  plan->algo = results[best].algo;
  plan->workspace = results[best].workspaceSize;
  plan->detail = describe(libs, results[best]) + ", " + how;
  return plan;
}

std::string run_cublaslt(const KernelCall& call) {
  const BlasLibraries& libs = BlasLibraries::probe().require_lt();
  const Dims d = dims_of(call);
  const int device = call.output->device.index;
  DeviceGuard guard(device);
  if (handle_empty(call, d)) return "";
  blas::LtHandle h = lt_handle(device);
  const PlanKey key{device, d.m, d.k, d.n, static_cast<int>(call.output->dtype)};
  // Workspace from the pool on the call's stream: stream order makes reuse safe.
  auto& pool = CachingAllocator::instance();
  void* workspace = pool.allocate(kLtWorkspaceBytes, device, call.stream);
  struct Release {
    void* p;
    ~Release() { CachingAllocator::instance().free(p); }
  } release{workspace};

  const LtPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    auto it = plans().find(key);
    if (it != plans().end()) plan = it->second.get();
  }
  if (plan == nullptr) {
    auto fresh = make_plan(libs, h, call, d, workspace);
    Decision chosen;
    chosen.op = "matmul";
    chosen.kernel = "cublasLt";
    chosen.library = "cuBLASLt";
    chosen.mode = "algorithm";
    chosen.reason = fresh->detail;
    chosen.shape = "[" + std::to_string(d.m) + ", " + std::to_string(d.k) + ", " +
                   std::to_string(d.n) + "]";
    chosen.dtype = dtype_name(call.output->dtype);
    chosen.device = call.output->device.str();
    std::lock_guard<std::mutex> lock(plans_mutex());
    auto [it, inserted] = plans().emplace(key, std::move(fresh));
    plan = it->second.get();
    if (inserted) Dispatcher::instance().log(chosen, plan->detail);
  }
  lt_launch(libs, h, *plan, plan->algo, call, workspace, kLtWorkspaceBytes);
  return plan->detail;
}

// Median-free timing for BestPerformance: synthetic inputs, one warm-up (which also tunes the
// cuBLASLt plan), then the average of a few launches with CUDA events.
std::function<double(const OpQuery&)> measurer(std::string (*run)(const KernelCall&)) {
  return [run](const OpQuery& q) {
    const DeviceRef dev = q.device;
    Tensor a = Tensor::empty({q.shape[0], q.shape[1]}, q.dtype, dev);
    Tensor b = Tensor::empty({q.shape[1], q.shape[2]}, q.dtype, dev);
    Tensor c = Tensor::empty({q.shape[0], q.shape[2]}, q.dtype, dev);
    DeviceGuard guard(dev.index);
    cuda::fill_uniform(a.data, q.dtype, static_cast<std::size_t>(a.numel()), 1, nullptr);
    cuda::fill_uniform(b.data, q.dtype, static_cast<std::size_t>(b.numel()), 2, nullptr);
    KernelCall call{{&a, &b}, {}, &c, nullptr, {}};
    run(call);
    cudaEvent_t start = nullptr, stop = nullptr;
    XRT_CUDA_CHECK(cudaEventCreate(&start));
    XRT_CUDA_CHECK(cudaEventCreate(&stop));
    constexpr int kRuns = 5;
    XRT_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < kRuns; ++i) run(call);
    XRT_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    XRT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    XRT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return static_cast<double>(ms) / kRuns;
  };
}
}  // namespace

std::vector<KernelDef> cuda_matmul_kernels() {
  KernelDef lt;
  lt.op = "matmul";
  lt.name = "cublasLt";
  lt.library = "cuBLASLt";
  lt.unsupported_reason = cuda_matmul_unsupported;
  lt.run = run_cublaslt;
  lt.measure = measurer(run_cublaslt);

  KernelDef cb;
  cb.op = "matmul";
  cb.name = "cublas";
  cb.library = "cuBLAS";
  cb.unsupported_reason = cuda_matmul_unsupported;
  cb.run = run_cublas;
  cb.measure = measurer(run_cublas);
  return {lt, cb};
}

}  // namespace xrt
