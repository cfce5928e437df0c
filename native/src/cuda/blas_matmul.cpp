// GEMM kernels over cuBLASLt (matmul and linear: every transpose combination, batches, fused
// epilogues, TF32; heuristic candidates timed on first use of a plan, the fastest cached) and
// cuBLAS (matmul: cublasGemmEx / cublasGemmStridedBatchedEx with the default algorithm).
//
// Tensors are row-major and cuBLAS is column-major, so C[M,N] = A[M,K] B[K,N] runs as the
// column-major product C^T[N,M] = B^T[N,K] A^T[K,M]: cuBLAS's first operand is our B, its
// second our A, m = N and n = M. A row-major operand is a column-major one of the transposed
// shape (operation N); a transposed view is a column-major matrix (operation T). No copies.
//
// Settings follow PyTorch's cuBLASLt calls (aten/src/ATen/cuda/CUDABlas.cpp) so that the
// heuristic sees what it sees there: fp32 compute and scale, CUBLAS_COMPUTE_32F_FAST_TF32 for
// fp32 under precision "tf32", the workspace PyTorch gives cuBLAS and cuBLASLt (32 MiB on
// sm_90+, 8 MiB + 128 KiB before), and minimum A/B/C alignments from the actual pointers (up
// to 256 bytes; D from the bias pointer for bias epilogues). Unlike PyTorch, which takes
// heuristic #0, up to kLtCandidates are timed (warm-up, rotating input copies so that L2 does
// not flatter small problems, interleaved rounds) and the fastest kept; the decision records
// the heuristic rank and time of each candidate.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "builtin_kernels.h"
#include "cuda/blas_loader.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "gemm.h"
#include "xpuruntime/device.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/stream.h"

namespace xrt {

namespace {
constexpr int kLtCandidates = 16;

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
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

// What cuBLAS(Lt) needs of a query before any library is touched.
std::string gemm_unsupported(const OpQuery& q, bool lt) {
  if (q.device.kind != DeviceKind::CUDA) {
    return "runs on CUDA devices only, inputs are on " + q.device.str();
  }
  if (q.dtype != DType::F32 && q.dtype != DType::F16 && q.dtype != DType::BF16) {
    return std::string("computes float32, float16 and bfloat16 only, got ") + dtype_name(q.dtype);
  }
  const std::string layout = blas_layout_problem(q.variant);
  if (!layout.empty()) return layout;
  const bool batched = q.shape.size() == 4;
  const std::int64_t batch = batched ? q.shape[0] : 1, m = q.shape[batched],
                     k = q.shape[batched + 1], n = q.shape[batched + 2];
  if (batch > INT_MAX) return "more than 2^31 - 1 batches";
  const Epilogue e = epilogue_of(q.variant);
  if (e != Epilogue::None && (m == 0 || n == 0 || k == 0)) {
    return "an empty dimension with a fused epilogue (M, K and N must be > 0)";
  }
  if (!lt) {
    if (e != Epilogue::None) return "cuBLAS has no fused epilogues; use 'cublasLt'";
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
      return "cublasGemmEx takes dimensions below 2^31; use 'cublasLt'";
    }
  }
  const BlasLibraries& libs = BlasLibraries::probe();
  if (lt ? !libs.lt_loaded : !libs.cublas_loaded) {
    return std::string(lt ? "cuBLASLt" : "cuBLAS") + " could not be loaded (" +
           (lt ? libs.lt_error : libs.cublas_error) +
           "); install nvidia-cublas (CUDA 13) or nvidia-cublas-cu12";
  }
  return "";
}

// cuBLAS's view of a problem (column-major; see the header comment).
struct BlasView {
  int op_first = 0, op_second = 0;  // operations of cuBLAS's A (our B) and B (our A)
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t ld_first = 0, ld_second = 0, ldc = 0;
  // Stored shape (rows, cols) of each operand as cuBLAS reads it.
  std::int64_t first_rows = 0, first_cols = 0, second_rows = 0, second_cols = 0;
};

BlasView blas_view(const GemmProblem& p) {
  BlasView v;
  v.m = p.n;
  v.n = p.m;
  v.k = p.k;
  v.ldc = std::max<std::int64_t>(p.n, 1);
  const bool b_t = p.b.layout == OperandLayout::Transposed;
  v.op_first = b_t ? blas::kOpT : blas::kOpN;
  v.first_rows = b_t ? p.k : p.n;
  v.first_cols = b_t ? p.n : p.k;
  v.ld_first = p.b.ld();
  const bool a_t = p.a.layout == OperandLayout::Transposed;
  v.op_second = a_t ? blas::kOpT : blas::kOpN;
  v.second_rows = a_t ? p.m : p.k;
  v.second_cols = a_t ? p.k : p.m;
  v.ld_second = p.a.ld();
  return v;
}

bool handle_empty(const GemmProblem& p, std::size_t out_bytes, void* stream) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return true;
  if (p.k == 0) {  // an empty sum: zeros (epilogues with K = 0 are refused before)
    XRT_CUDA_CHECK(cudaMemsetAsync(p.c, 0, out_bytes, static_cast<cudaStream_t>(stream)));
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
  const GemmProblem p = gemm_problem(call, call.variant);
  DeviceGuard guard(call.output->device.index);
  if (handle_empty(p, call.output->nbytes(), call.stream)) return "";
  const BlasView v = blas_view(p);
  if (v.ld_first > INT_MAX || v.ld_second > INT_MAX || v.ldc > INT_MAX) {
    throw UnsupportedOperationError("cuBLAS takes leading dimensions below 2^31; use 'cublasLt'");
  }
  blas::Handle h = cublas_handle(call.output->device.index);
  check(libs.cublasSetStream(h, static_cast<cudaStream_t>(call.stream)), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType t = data_type(p.dtype);
  const int compute = p.tf32 ? blas::kCompute32FFastTF32 : blas::kCompute32F;
  const auto i = [](std::int64_t x) { return static_cast<int>(x); };
  if (p.batch == 1) {
    check(libs.cublasGemmEx(h, v.op_first, v.op_second, i(v.m), i(v.n), i(v.k), &alpha, p.b.data,
                            t, i(v.ld_first), p.a.data, t, i(v.ld_second), &beta, p.c, t,
                            i(v.ldc), compute, blas::kGemmDefault),
          "cublasGemmEx");
    return "cublasGemmEx, CUBLAS_GEMM_DEFAULT";
  }
  check(libs.cublasGemmStridedBatchedEx(
            h, v.op_first, v.op_second, i(v.m), i(v.n), i(v.k), &alpha, p.b.data, t,
            i(v.ld_first), p.b.batch_stride, p.a.data, t, i(v.ld_second), p.a.batch_stride, &beta,
            p.c, t, i(v.ldc), p.m * p.n, i(p.batch), compute, blas::kGemmDefault),
        "cublasGemmStridedBatchedEx");
  return "cublasGemmStridedBatchedEx, CUBLAS_GEMM_DEFAULT";
}

// ---- cuBLASLt -------------------------------------------------------------------------

std::uint32_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::None: return blas::kEpilogueDefault;
    case Epilogue::Bias: return blas::kEpilogueBias;
    case Epilogue::Relu: return blas::kEpilogueRelu;
    case Epilogue::ReluBias: return blas::kEpilogueReluBias;
    case Epilogue::Gelu: return blas::kEpilogueGelu;
    case Epilogue::GeluBias: return blas::kEpilogueGeluBias;
    case Epilogue::GeluAux: return blas::kEpilogueGeluAux;
    case Epilogue::GeluAuxBias: return blas::kEpilogueGeluAuxBias;
    case Epilogue::DGelu: return blas::kEpilogueDGelu;
    case Epilogue::DGeluBGrad: return blas::kEpilogueDGeluBGrad;
    case Epilogue::BGradA: return blas::kEpilogueBGradA;
    case Epilogue::BGradB: return blas::kEpilogueBGradB;
  }
  return blas::kEpilogueDefault;
}

// As PyTorch's _getAlignment: the largest power of two up to 256 dividing the address.
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && a % alignment != 0) alignment /= 2;
  return alignment;
}

// The workspace PyTorch gives cuBLAS(Lt) by default (CublasHandlePool.cpp): 32 MiB on
// sm_90 and later, 4096 KiB * 2 + 16 KiB * 8 before.
std::size_t workspace_limit(int device) {
  static std::mutex m;
  static std::unordered_map<int, std::size_t> limits;
  std::lock_guard<std::mutex> lock(m);
  auto it = limits.find(device);
  if (it != limits.end()) return it->second;
  int major = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const std::size_t bytes = major >= 9 ? std::size_t{32} << 20 : 4096 * 1024 * 2 + 16 * 1024 * 8;
  limits.emplace(device, bytes);
  return bytes;
}

std::size_t l2_bytes(int device) {
  int l2 = 0;
  XRT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return static_cast<std::size_t>(std::max(l2, 1 << 20));
}

// Everything that makes two calls use one plan (descriptors and algorithm).
struct PlanKey {
  int device;
  DType dtype;
  std::uint32_t variant;  // layouts, epilogue, TF32
  std::int64_t batch, m, k, n;
  std::int64_t lda, ldb, stride_a, stride_b, aux_ld;
  std::uint32_t align_a, align_b, align_c, align_bias;
  std::uint64_t locked;  // hash of a locked algorithm, 0 without one
  bool operator==(const PlanKey& o) const {
    return device == o.device && dtype == o.dtype && variant == o.variant && batch == o.batch &&
           m == o.m && k == o.k && n == o.n && lda == o.lda && ldb == o.ldb &&
           stride_a == o.stride_a && stride_b == o.stride_b && aux_ld == o.aux_ld &&
           align_a == o.align_a && align_b == o.align_b && align_c == o.align_c &&
           align_bias == o.align_bias && locked == o.locked;
  }
};
struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const {
    std::uint64_t h = 1469598103934665603ULL;
    const std::int64_t fields[] = {k.device, static_cast<std::int64_t>(k.dtype), k.variant,
                                   k.batch, k.m, k.k, k.n, k.lda, k.ldb, k.stride_a, k.stride_b,
                                   k.aux_ld, k.align_a, k.align_b, k.align_c, k.align_bias,
                                   static_cast<std::int64_t>(k.locked)};
    for (auto f : fields) {
      h ^= static_cast<std::uint64_t>(f);
      h *= 1099511628211ULL;
    }
    return static_cast<std::size_t>(h);
  }
};

std::uint64_t algorithm_hash(const AlgorithmConfig& a) {
  if (a.empty()) return 0;
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& [name, value] : a) {
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    h = (h ^ static_cast<std::uint64_t>(value)) * 1099511628211ULL;
  }
  return h | 1;
}

struct LtPlan {
  blas::MatmulDesc desc = nullptr;
  blas::MatrixLayout a = nullptr, b = nullptr, c = nullptr;  // cuBLAS's A (our B), B (our A)
  blas::MatmulAlgo algo{};
  std::size_t workspace = 0;
  bool per_call_pointers = false;  // bias / aux pointers are set on `desc` for each call
  std::mutex launch_mutex;         // guards `desc` while those pointers are set and used
  DecisionNotes notes;

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

std::shared_mutex& plans_mutex() {
  static auto* m = new std::shared_mutex();
  return *m;
}
std::unordered_map<PlanKey, std::shared_ptr<LtPlan>, PlanKeyHash>& plans() {
  // Lives to exit: plans must not be destroyed after cuBLASLt has been unloaded.
  static auto* p = new std::unordered_map<PlanKey, std::shared_ptr<LtPlan>, PlanKeyHash>();
  return *p;
}

void clear_plans() {
  std::unique_lock<std::shared_mutex> lock(plans_mutex());
  plans().clear();
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

// The pointers of one launch (the call's own, or a rotating copy while timing).
struct LtBuffers {
  const void* a;  // our A
  const void* b;  // our B
  void* c;
  const void* bias;  // bias (forward) or bias gradient (BGRAD) pointer
  const void* aux;   // pre-activation (stored or read)
};

LtBuffers buffers_of(const GemmProblem& p) {
  return {p.a.data, p.b.data, p.c, p.bias != nullptr ? p.bias : p.bias_grad,
          p.aux_out != nullptr ? p.aux_out : p.aux_in};
}

template <typename T>
void set_desc(const BlasLibraries& libs, blas::MatmulDesc desc, int attr, const T& value) {
  check(libs.ltDescSetAttribute(desc, attr, &value, sizeof value), "cublasLtMatmulDescSetAttribute");
}

blas::Status lt_launch(const BlasLibraries& libs, blas::LtHandle h, LtPlan& plan,
                       const blas::MatmulAlgo& algo, const LtBuffers& buf, void* workspace,
                       std::size_t workspace_bytes, void* stream) {
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&] {
    return libs.ltMatmul(h, plan.desc, &alpha, buf.b, plan.a, buf.a, plan.b, &beta, buf.c, plan.c,
                         buf.c, plan.c, &algo, workspace, workspace_bytes,
                         static_cast<cudaStream_t>(stream));
  };
  if (!plan.per_call_pointers) return launch();
  std::lock_guard<std::mutex> lock(plan.launch_mutex);
  if (buf.bias != nullptr) set_desc(libs, plan.desc, blas::kDescBiasPointer, buf.bias);
  if (buf.aux != nullptr) set_desc(libs, plan.desc, blas::kDescEpilogueAuxPointer, buf.aux);
  return launch();
}

AlgorithmConfig algorithm_config(const BlasLibraries& libs, const blas::MatmulAlgo& algo,
                                 std::size_t workspace) {
  std::int32_t id = 0, split_k = 0;
  std::uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0, custom = 0;
  std::uint16_t inner = 0, cluster = 0;
  std::size_t written = 0;
  auto get = [&](int attr, void* out, std::size_t size) {
    // Attributes a cuBLASLt release does not know stay 0.
    libs.ltAlgoConfigGetAttribute(&algo, attr, out, size, &written);
  };
  get(blas::kAlgoConfigId, &id, sizeof id);
  get(blas::kAlgoConfigTileId, &tile, sizeof tile);
  get(blas::kAlgoConfigStagesId, &stages, sizeof stages);
  get(blas::kAlgoConfigSplitK, &split_k, sizeof split_k);
  get(blas::kAlgoConfigReduction, &reduction, sizeof reduction);
  get(blas::kAlgoConfigSwizzle, &swizzle, sizeof swizzle);
  get(blas::kAlgoConfigCustomOption, &custom, sizeof custom);
  get(blas::kAlgoConfigInnerShape, &inner, sizeof inner);
  get(blas::kAlgoConfigClusterShape, &cluster, sizeof cluster);
  return {{"algo_id", id},          {"tile", tile},       {"stages", stages},
          {"splitk", split_k},      {"reduction", reduction}, {"swizzle", swizzle},
          {"custom", custom},       {"inner_shape", inner},   {"cluster_shape", cluster},
          {"workspace", static_cast<std::int64_t>(workspace)}};
}

std::string describe(const AlgorithmConfig& a) {
  std::string s = "cuBLASLt";
  for (const auto& [name, value] : a) s += " " + name + "=" + std::to_string(value);
  return s;
}

std::int64_t config_value(const AlgorithmConfig& a, const char* name, bool* found) {
  for (const auto& [n, v] : a) {
    if (n == name) {
      *found = true;
      return v;
    }
  }
  *found = false;
  return 0;
}

// Rebuilds a serialised algorithm for the plan's descriptors: "" and `algo`, `workspace` set
// when cuBLASLt accepts it (cublasLtMatmulAlgoCheck), else why not.
std::string rebuild_algorithm(const BlasLibraries& libs, blas::LtHandle h, const LtPlan& plan,
                              DType dtype, bool tf32, const AlgorithmConfig& config,
                              std::size_t limit, blas::MatmulAlgo* algo, std::size_t* workspace) {
  bool found = false;
  const auto id = config_value(config, "algo_id", &found);
  if (!found) return "the algorithm has no algo_id";
  const cudaDataType t = data_type(dtype);
  const blas::Status init = libs.ltAlgoInit(
      h, tf32 ? blas::kCompute32FFastTF32 : blas::kCompute32F, CUDA_R_32F, t, t, t, t,
      static_cast<int>(id), algo);
  if (init != blas::kSuccess) {
    return std::string("cublasLtMatmulAlgoInit(algo_id=") + std::to_string(id) + ") failed: " +
           status_name(init);
  }
  auto set = [&](const char* name, int attr, auto typed) -> std::string {
    bool present = false;
    const auto v = config_value(config, name, &present);
    if (!present) return "";
    decltype(typed) value = static_cast<decltype(typed)>(v);
    const blas::Status s = libs.ltAlgoConfigSetAttribute(algo, attr, &value, sizeof value);
    return s == blas::kSuccess ? "" : std::string("setting ") + name + " failed: " + status_name(s);
  };
  for (const std::string& err :
       {set("tile", blas::kAlgoConfigTileId, std::uint32_t{}),
        set("stages", blas::kAlgoConfigStagesId, std::uint32_t{}),
        set("splitk", blas::kAlgoConfigSplitK, std::int32_t{}),
        set("reduction", blas::kAlgoConfigReduction, std::uint32_t{}),
        set("swizzle", blas::kAlgoConfigSwizzle, std::uint32_t{}),
        set("custom", blas::kAlgoConfigCustomOption, std::uint32_t{}),
        set("inner_shape", blas::kAlgoConfigInnerShape, std::uint16_t{}),
        set("cluster_shape", blas::kAlgoConfigClusterShape, std::uint16_t{})}) {
    if (!err.empty()) return err;
  }
  blas::HeuristicResult result{};
  const blas::Status s =
      libs.ltAlgoCheck(h, plan.desc, plan.a, plan.b, plan.c, plan.c, algo, &result);
  if (s != blas::kSuccess) return std::string("cublasLtMatmulAlgoCheck: ") + status_name(s);
  if (result.workspaceSize > limit) {
    return "it needs " + std::to_string(result.workspaceSize) + " bytes of workspace, more than " +
           std::to_string(limit);
  }
  *workspace = result.workspaceSize;
  return "";
}

// Descriptors of a problem; pointers of bias/aux are set per call when the epilogue has them.
std::unique_ptr<LtPlan> make_descriptors(const BlasLibraries& libs, const GemmProblem& p) {
  auto plan = std::make_unique<LtPlan>();
  const BlasView v = blas_view(p);
  const cudaDataType t = data_type(p.dtype);
  check(libs.ltDescCreate(&plan->desc, p.tf32 ? blas::kCompute32FFastTF32 : blas::kCompute32F,
                          CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  set_desc(libs, plan->desc, blas::kDescTransA, v.op_first);
  set_desc(libs, plan->desc, blas::kDescTransB, v.op_second);
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  check(libs.ltLayoutCreate(&plan->a, t, u(v.first_rows), u(v.first_cols), v.ld_first),
        "cublasLtMatrixLayoutCreate");
  check(libs.ltLayoutCreate(&plan->b, t, u(v.second_rows), u(v.second_cols), v.ld_second),
        "cublasLtMatrixLayoutCreate");
  check(libs.ltLayoutCreate(&plan->c, t, u(v.m), u(v.n), v.ldc), "cublasLtMatrixLayoutCreate");
  if (p.batch > 1) {
    const auto count = static_cast<std::int32_t>(p.batch);
    const std::int64_t strides[] = {p.b.batch_stride, p.a.batch_stride, p.m * p.n};
    const blas::MatrixLayout layouts[] = {plan->a, plan->b, plan->c};
    for (int i = 0; i < 3; ++i) {
      check(libs.ltLayoutSetAttribute(layouts[i], blas::kLayoutBatchCount, &count, sizeof count),
            "cublasLtMatrixLayoutSetAttribute");
      check(libs.ltLayoutSetAttribute(layouts[i], blas::kLayoutStridedBatchOffset, &strides[i],
                                      sizeof strides[i]),
            "cublasLtMatrixLayoutSetAttribute");
    }
  }
  if (p.epilogue != Epilogue::None) {
    set_desc(libs, plan->desc, blas::kDescEpilogue, lt_epilogue(p.epilogue));
    plan->per_call_pointers = true;
    const LtBuffers buf = buffers_of(p);
    if (buf.bias != nullptr) set_desc(libs, plan->desc, blas::kDescBiasPointer, buf.bias);
    if (buf.aux != nullptr) {
      set_desc(libs, plan->desc, blas::kDescEpilogueAuxPointer, buf.aux);
      set_desc(libs, plan->desc, blas::kDescEpilogueAuxLd, p.aux_ld);
      if (p.batch > 1) {
        const std::int64_t stride = p.aux_ld * p.m;
        set_desc(libs, plan->desc, blas::kDescEpilogueAuxBatchStride, stride);
      }
    }
  }
  return plan;
}

// Element span of an operand from its first element, and of the output.
std::int64_t span_elements(const GemmOperand& o, std::int64_t batch) {
  const std::int64_t one = o.layout == OperandLayout::RowMajor
                               ? (o.rows - 1) * o.ld() + o.cols
                               : (o.cols - 1) * o.ld() + o.rows;
  return one + (batch - 1) * o.batch_stride;
}

// Rotating copies of the problem's buffers for timing, filled with values in [-1, 1), each
// placed at the same alignment as the call's pointers. Empty when the problem is larger than
// twice L2 (then the call's own buffers are used: the inputs are only read and the outputs
// are written again by the real launch).
struct TimingSets {
  std::vector<LtBuffers> sets;
  std::vector<void*> blocks;
  ~TimingSets() {
    for (void* b : blocks) CachingAllocator::instance().free(b);
  }
};

void make_timing_sets(const GemmProblem& p, int device, void* stream, TimingSets& out) {
  const std::size_t item = dtype_size(p.dtype);
  const std::int64_t a_n = span_elements(p.a, p.batch), b_n = span_elements(p.b, p.batch);
  const std::int64_t c_n = p.batch * p.m * p.n;
  const std::int64_t bias_n = p.bias || p.bias_grad ? std::max(p.m, p.n) : 0;
  const std::int64_t aux_n = p.aux_in || p.aux_out ? p.batch * p.m * p.aux_ld : 0;
  const std::size_t set_bytes = static_cast<std::size_t>(a_n + b_n + c_n + bias_n + aux_n) * item;
  const std::size_t budget = 2 * l2_bytes(device);
  if (set_bytes == 0 || set_bytes >= budget) return;
  const int count = static_cast<int>(std::min<std::size_t>(8, (budget + set_bytes - 1) / set_bytes));
  auto& pool = CachingAllocator::instance();
  std::uint32_t seed = 1;
  auto region = [&](std::int64_t elements, const void* like, bool fill) -> void* {
    if (elements == 0) return nullptr;
    const std::size_t offset = reinterpret_cast<std::uintptr_t>(like) % 256;
    void* block = pool.allocate(static_cast<std::size_t>(elements) * item + 256, device, stream);
    out.blocks.push_back(block);
    void* p0 = static_cast<char*>(block) + offset;
    if (fill) cuda::fill_uniform(p0, p.dtype, static_cast<std::size_t>(elements), seed++, stream);
    return p0;
  };
  const LtBuffers own = buffers_of(p);
  for (int i = 0; i < count; ++i) {
    LtBuffers s{};
    s.a = region(a_n, own.a, true);
    s.b = region(b_n, own.b, true);
    s.c = region(c_n, own.c, false);
    s.bias = own.bias ? region(bias_n, own.bias, true) : nullptr;
    s.aux = own.aux ? region(aux_n, own.aux, true) : nullptr;
    out.sets.push_back(s);
  }
}

class EventPair {
 public:
  EventPair() {
    XRT_CUDA_CHECK(cudaEventCreate(&start));
    XRT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// Builds the descriptors and picks the algorithm for one plan key: the locked algorithm in
// replay, else the fastest of the heuristic candidates.
std::shared_ptr<LtPlan> make_plan(const BlasLibraries& libs, blas::LtHandle h,
                                  const GemmProblem& p, const KernelCall& call, int device) {
  std::shared_ptr<LtPlan> plan = make_descriptors(libs, p);
  const std::size_t limit = workspace_limit(device);
  const Decision* decision = call.decision;
  if (decision != nullptr && decision->locked && !decision->locked->algorithm.empty()) {
    std::size_t ws = 0;
    const std::string why_not = rebuild_algorithm(libs, h, *plan, p.dtype, p.tf32,
                                                  decision->locked->algorithm, limit, &plan->algo, &ws);
    if (why_not.empty()) {
      plan->workspace = ws;
      plan->notes.algorithm = algorithm_config(libs, plan->algo, ws);
      plan->notes.detail = describe(plan->notes.algorithm) + ", replayed from the lock";
      return plan;
    }
    decision->fall_back("locked algorithm rejected here (" + why_not + ")");
    Dispatcher::instance().report_lock_problem(
        LockProblem{decision->query, decision->kernel, "locked algorithm rejected: " + why_not});
  }

  blas::Preference pref = nullptr;
  check(libs.ltPrefCreate(&pref), "cublasLtMatmulPreferenceCreate");
  struct PrefGuard {
    const BlasLibraries& libs;
    blas::Preference p;
    ~PrefGuard() { libs.ltPrefDestroy(p); }
  } pref_guard{libs, pref};
  const std::uint64_t max_ws = limit;
  check(libs.ltPrefSetAttribute(pref, blas::kPrefMaxWorkspaceBytes, &max_ws, sizeof max_ws),
        "cublasLtMatmulPreferenceSetAttribute");
  const LtBuffers own = buffers_of(p);
  const std::uint32_t align[] = {alignment_of(own.b), alignment_of(own.a), alignment_of(own.c),
                                 epilogue_has_bias(p.epilogue) ? alignment_of(own.bias)
                                                               : alignment_of(own.c)};
  const int align_attr[] = {blas::kPrefMinAlignmentA, blas::kPrefMinAlignmentB,
                            blas::kPrefMinAlignmentC, blas::kPrefMinAlignmentD};
  for (int i = 0; i < 4; ++i) {
    check(libs.ltPrefSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]),
          "cublasLtMatmulPreferenceSetAttribute");
  }
  blas::HeuristicResult results[kLtCandidates] = {};
  int found = 0;
  check(libs.ltGetHeuristic(h, plan->desc, plan->a, plan->b, plan->c, plan->c, pref,
                            kLtCandidates, results, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    throw UnsupportedOperationError("cuBLASLt offers no algorithm for this GEMM (" +
                                    layout_text(call.variant) + ")");
  }
  int best = 0;
  std::string how;
  if (found == 1 || stream_is_capturing(call.stream)) {
    how = found == 1 ? "the only heuristic candidate"
                     : "heuristic #0, not timed: the stream is being captured into a graph";
  } else {
    // Timing: one warm-up launch per candidate (dropping those that fail to launch), an
    // estimate, then three interleaved rounds of `reps` launches each over rotating input
    // copies; candidates more than 1.5x slower than the best after a round stop early.
    void* workspace = CachingAllocator::instance().allocate(limit, device, call.stream);
    struct Release {
      void* p;
      ~Release() { CachingAllocator::instance().free(p); }
    } release{workspace};
    TimingSets timing;
    make_timing_sets(p, device, call.stream, timing);
    if (timing.sets.empty()) timing.sets.push_back(own);
    std::size_t next_set = 0;
    auto launch = [&](int i) {
      const LtBuffers& buf = timing.sets[next_set++ % timing.sets.size()];
      return lt_launch(libs, h, *plan, results[i].algo, buf, workspace, limit, call.stream);
    };
    EventPair ev;
    auto time_one = [&](int i, int reps) {
      XRT_CUDA_CHECK(cudaEventRecord(ev.start, static_cast<cudaStream_t>(call.stream)));
      for (int r = 0; r < reps; ++r) launch(i);
      XRT_CUDA_CHECK(cudaEventRecord(ev.stop, static_cast<cudaStream_t>(call.stream)));
      XRT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0;
      XRT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      return static_cast<double>(ms) / reps;
    };
    std::vector<int> alive;
    std::vector<std::vector<double>> samples(static_cast<std::size_t>(found));
    double fastest = 1e30;
    for (int i = 0; i < found; ++i) {
      if (launch(i) != blas::kSuccess) continue;  // warm-up; a candidate may not launch
      alive.push_back(i);
      fastest = std::min(fastest, time_one(i, 1));
    }
    if (alive.empty()) throw CudaError("no cuBLASLt heuristic candidate launches for this GEMM");
    const int reps = static_cast<int>(std::clamp(std::ceil(0.25 / std::max(fastest, 1e-4)), 1.0, 50.0));
    for (int round = 0; round < 3; ++round) {
      double round_best = 1e30;
      for (std::size_t j = 0; j < alive.size(); ++j) {
        const int i = alive[(j + static_cast<std::size_t>(round)) % alive.size()];
        samples[i].push_back(time_one(i, reps));
        round_best = std::min(round_best, samples[i].back());
      }
      std::vector<int> keep;
      for (int i : alive) {
        if (round == 2 || *std::min_element(samples[i].begin(), samples[i].end()) <= 1.5 * round_best) {
          keep.push_back(i);
        }
      }
      alive.swap(keep);
    }
    double best_ms = 1e30;
    for (int i = 0; i < found; ++i) {
      if (samples[i].empty()) continue;
      std::vector<double> s = samples[i];
      std::sort(s.begin(), s.end());
      const double median = s[s.size() / 2];
      TimedCandidate c;
      c.algorithm = algorithm_config(libs, results[i].algo, results[i].workspaceSize);
      c.rank = i;
      c.ms = median;
      plan->notes.candidates.push_back(std::move(c));
      if (median < best_ms) {
        best_ms = median;
        best = i;
      }
    }
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "heuristic rank %d, fastest of %d candidates timed on first use (%.4f ms; "
                  "heuristic #0 %.4f ms)",
                  best, found, best_ms,
                  samples[0].empty() ? -1.0 : *std::min_element(samples[0].begin(), samples[0].end()));
    how = buf;
  }
  plan->algo = results[best].algo;
  plan->workspace = results[best].workspaceSize;
  plan->notes.algorithm = algorithm_config(libs, plan->algo, plan->workspace);
  plan->notes.detail = describe(plan->notes.algorithm) + ", " + how;
  return plan;
}

PlanKey plan_key(const GemmProblem& p, const KernelCall& call, int device) {
  const LtBuffers own = buffers_of(p);
  const Decision* d = call.decision;
  return PlanKey{device,
                 p.dtype,
                 call.variant,
                 p.batch,
                 p.m,
                 p.k,
                 p.n,
                 p.a.ld(),
                 p.b.ld(),
                 p.a.batch_stride,
                 p.b.batch_stride,
                 p.aux_ld,
                 alignment_of(own.a),
                 alignment_of(own.b),
                 alignment_of(own.c),
                 own.bias ? alignment_of(own.bias) : 0u,
                 d && d->locked ? algorithm_hash(d->locked->algorithm) : 0};
}

bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  XRT_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

// The workspace of GEMMs captured into CUDA graphs (torch.cuda.graph or the core's own):
// one buffer per device of the largest workspace a plan may take, made once and never freed
// nor handed to anything else, since every graph that captured it reads it on each replay.
// PyTorch does the same with its cuBLAS workspace, and the same caveat holds: graphs that
// replay concurrently on different streams must not share it. It is allocated in relaxed
// capture mode, since a global-mode capture refuses cudaMalloc.
void* capture_workspace(int device) {
  static std::mutex m;
  static std::unordered_map<int, void*> buffers;
  std::lock_guard<std::mutex> lock(m);
  void*& buffer = buffers[device];
  if (buffer == nullptr) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    XRT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t status = cudaMalloc(&buffer, workspace_limit(device));
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (status != cudaSuccess) {
      buffer = nullptr;
      XRT_CUDA_CHECK(status);
    }
  }
  return buffer;
}

std::string run_cublaslt(const KernelCall& call) {
  const BlasLibraries& libs = BlasLibraries::probe().require_lt();
  const GemmProblem p = gemm_problem(call, call.variant);
  const int device = call.output->device.index;
  DeviceGuard guard(device);
  if (handle_empty(p, call.output->nbytes(), call.stream)) return "";
  if ((epilogue_reads_aux(p.epilogue) || epilogue_stores_aux(p.epilogue)) && p.aux_ld % 8 != 0) {
    throw UnsupportedOperationError(
        "cuBLASLt needs the pre-activation's row stride to be a multiple of 8 elements, got " +
        std::to_string(p.aux_ld) + " (pass the buffer linear(..., save_preactivation=True) "
        "returned, or use the 'cpu' kernel)");
  }
  blas::LtHandle h = lt_handle(device);
  const PlanKey key = plan_key(p, call, device);
  std::shared_ptr<LtPlan> plan;
  {
    std::shared_lock<std::shared_mutex> lock(plans_mutex());
    auto it = plans().find(key);
    if (it != plans().end()) plan = it->second;
  }
  const bool capturing = stream_is_capturing(call.stream);
  if (!plan && capturing) {
    // Choosing a plan times candidate kernels, which a capture would record into the graph.
    throw UnsupportedOperationError(
        "this GEMM shape has not run on this device before the CUDA graph capture began: run "
        "the captured code once before capturing (the usual warm-up), so cuBLASLt's algorithm "
        "is chosen outside the graph");
  }
  if (!plan) {
    std::shared_ptr<LtPlan> fresh = make_plan(libs, h, p, call, device);
    std::unique_lock<std::shared_mutex> lock(plans_mutex());
    plan = plans().emplace(key, std::move(fresh)).first->second;
  }
  if (call.decision != nullptr && !call.decision->has_notes()) call.decision->set_notes(plan->notes);
  // Workspace from the pool on the call's stream: stream order makes reuse safe. Not so for
  // a capture: the graph reads it on every replay, so it gets the capture workspace.
  void* workspace = nullptr;
  void* pooled = nullptr;
  if (plan->workspace > 0) {
    workspace = capturing ? capture_workspace(device)
                          : (pooled = CachingAllocator::instance().allocate(plan->workspace,
                                                                             device, call.stream));
  }
  struct Release {
    void* p;
    ~Release() {
      if (p) CachingAllocator::instance().free(p);
    }
  } release{pooled};
  check(lt_launch(libs, h, *plan, plan->algo, buffers_of(p), workspace, plan->workspace,
                  call.stream),
        "cublasLtMatmul");
  return plan->notes.detail;
}

// A GemmProblem with the default leading dimensions of a query (lock validation).
std::string lt_check_algorithm(const OpQuery& q, const AlgorithmConfig& algorithm) {
  const BlasLibraries& libs = BlasLibraries::probe().require_lt();
  DeviceGuard guard(q.device.index);
  const bool batched = q.shape.size() == 4;
  GemmProblem p;
  p.batch = batched ? q.shape[0] : 1;
  p.m = q.shape[batched];
  p.k = q.shape[batched + 1];
  p.n = q.shape[batched + 2];
  p.dtype = q.dtype;
  p.epilogue = epilogue_of(q.variant);
  p.tf32 = (q.variant & layout::kTf32) != 0;
  auto operand = [](bool trans, std::int64_t rows, std::int64_t cols, std::int64_t batch) {
    GemmOperand o;
    o.rows = rows;
    o.cols = cols;
    o.layout = trans ? OperandLayout::Transposed : OperandLayout::RowMajor;
    o.row_stride = trans ? 1 : cols;
    o.col_stride = trans ? rows : 1;
    o.batch_stride = batch > 1 ? rows * cols : 0;
    return o;
  };
  p.a = operand(q.variant & layout::kTransA, p.m, p.k, p.batch);
  p.b = operand(q.variant & layout::kTransB, p.k, p.n, p.batch);
  p.aux_ld = std::max<std::int64_t>((p.n + 7) / 8 * 8, 8);
  std::unique_ptr<LtPlan> plan = make_descriptors(libs, p);
  blas::MatmulAlgo algo{};
  std::size_t ws = 0;
  return rebuild_algorithm(libs, lt_handle(q.device.index), *plan, q.dtype, p.tf32, algorithm,
                           workspace_limit(q.device.index), &algo, &ws);
}

// BestPerformance among kernels: synthetic inputs in the query's layout, one warm-up (which
// also tunes the cuBLASLt plan), then the average of a few launches with CUDA events.
std::function<double(const OpQuery&)> measurer(std::string (*run)(const KernelCall&)) {
  return [run](const OpQuery& q) {
    const DeviceRef dev = q.device;
    const bool batched = q.shape.size() == 4;
    const std::int64_t b = batched ? q.shape[0] : 1, m = q.shape[batched], k = q.shape[batched + 1],
                       n = q.shape[batched + 2];
    auto operand = [&](bool trans, std::int64_t rows, std::int64_t cols) {
      Tensor t = Tensor::empty({b, trans ? cols : rows, trans ? rows : cols}, q.dtype, dev);
      if (trans) {
        t.shape = {b, rows, cols};
        t.strides = {rows * cols, 1, rows};
      }
      return t;
    };
    Tensor ta = operand(q.variant & layout::kTransA, m, k);
    Tensor tb = operand(q.variant & layout::kTransB, k, n);
    Tensor c = Tensor::empty({b, m, n}, q.dtype, dev);
    DeviceGuard guard(dev.index);
    cuda::fill_uniform(ta.data, q.dtype, static_cast<std::size_t>(b * m * k), 1, nullptr);
    cuda::fill_uniform(tb.data, q.dtype, static_cast<std::size_t>(b * k * n), 2, nullptr);
    KernelCall call{{&ta, &tb}, {}, &c, nullptr};
    call.variant = q.variant;
    run(call);
    EventPair ev;
    constexpr int kRuns = 5;
    XRT_CUDA_CHECK(cudaEventRecord(ev.start, nullptr));
    for (int i = 0; i < kRuns; ++i) run(call);
    XRT_CUDA_CHECK(cudaEventRecord(ev.stop, nullptr));
    XRT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    XRT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    return static_cast<double>(ms) / kRuns;
  };
}

KernelDef lt_kernel(const char* op) {
  KernelDef lt;
  lt.op = op;
  lt.name = "cublasLt";
  lt.library = "cuBLASLt";
  lt.unsupported_reason = [](const OpQuery& q) { return gemm_unsupported(q, true); };
  lt.run = run_cublaslt;
  lt.check_algorithm = lt_check_algorithm;
  static std::once_flag hook;
  std::call_once(hook, [] { Dispatcher::instance().on_clear(clear_plans); });
  return lt;
}
}  // namespace

std::vector<KernelDef> cuda_matmul_kernels() {
  KernelDef lt = lt_kernel("matmul");
  lt.measure = measurer(run_cublaslt);

  KernelDef cb;
  cb.op = "matmul";
  cb.name = "cublas";
  cb.library = "cuBLAS";
  cb.unsupported_reason = [](const OpQuery& q) { return gemm_unsupported(q, false); };
  cb.run = run_cublas;
  cb.measure = measurer(run_cublas);
  return {lt, cb};
}

KernelDef cuda_linear_kernel() { return lt_kernel("linear"); }

}  // namespace xrt
