// KernelRegistry: which kernels implement an op, in priority order, each able to say whether
// it can run a given (shape, dtype, device) and, for BestPerformance, to time itself.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xpuruntime/tensor.h"

namespace xrt {

struct OpQuery {
  std::string op;
  // op-specific: matmul and linear [M, K, N] or [B, M, K, N] (batched), layernorm x's shape
  std::vector<std::int64_t> shape;
  DType dtype = DType::F32;
  DeviceRef device;
  // op-specific layout code (matmul, linear: the `layout` bits below); 0 for plain ops.
  std::uint32_t variant = 0;
};

// OpQuery::variant of GEMM ops: how each operand of a @ b is stored, the fused epilogue and
// whether fp32 may compute in TF32. Rendered as text ("TN+GELU_BIAS:tf32") by layout_text().
namespace layout {
constexpr std::uint32_t kTransA = 1u << 0;    // a is stored transposed (column-major)
constexpr std::uint32_t kTransB = 1u << 1;    // b is stored transposed
constexpr std::uint32_t kStridedA = 1u << 2;  // a has strides BLAS cannot take
constexpr std::uint32_t kStridedB = 1u << 3;
constexpr std::uint32_t kTf32 = 1u << 4;      // fp32 inputs may be rounded to TF32
constexpr std::uint32_t kGemm = 1u << 5;      // set on every GEMM query ("NN" is not "")
constexpr int kEpilogueShift = 8;             // bits 8..15: the Epilogue
}  // namespace layout

// Fused GEMM epilogues (cuBLASLt's names). *_AUX store the pre-activation for backward;
// DGELU* apply GELU's derivative to the product using that stored pre-activation; *BGRAD*
// also reduce a bias gradient.
enum class Epilogue : std::uint8_t {
  None, Bias, Relu, ReluBias, Gelu, GeluBias, GeluAux, GeluAuxBias, DGelu, DGeluBGrad,
  BGradA, BGradB,
};
const char* epilogue_name(Epilogue e);  // "BIAS", "GELU_AUX_BIAS", ...
inline Epilogue epilogue_of(std::uint32_t variant) {
  return static_cast<Epilogue>((variant >> layout::kEpilogueShift) & 0xffu);
}
inline std::uint32_t with_epilogue(std::uint32_t variant, Epilogue e) {
  return (variant & ~(0xffu << layout::kEpilogueShift)) |
         (static_cast<std::uint32_t>(e) << layout::kEpilogueShift);
}

struct Decision;

// Inputs/outputs of one kernel call; scalars carry op parameters (layernorm's eps).
struct KernelCall {
  std::vector<const Tensor*> inputs;
  std::vector<double> scalars;
  Tensor* output = nullptr;
  void* stream = nullptr;
  // The decision being run (null when a kernel is timed outside a decision): kernels attach
  // what they chose (notes) and read a locked algorithm from it.
  const Decision* decision = nullptr;
  // Further outputs of ops with several (linear's pre-activation, a bias gradient).
  std::vector<Tensor*> extra_outputs{};
  std::uint32_t variant = 0;  // the query's layout code (GEMM epilogue, TF32)
};

struct KernelDef {
  std::string op;
  std::string name;     // the name a KernelPolicy uses: "cublasLt", "cublas", "cpu"
  std::string library;  // what actually runs it: "cuBLASLt", "cuBLAS", "xpuruntime CPU"
  // "" when the kernel can run the query, else why it cannot (shown to the user).
  std::function<std::string(const OpQuery&)> unsupported_reason;
  // Runs the kernel; returns a detail worth recording (the algorithm chosen), may be "".
  std::function<std::string(const KernelCall&)> run;
  // Median milliseconds of the kernel on synthetic inputs of the query; null = not timeable.
  std::function<double(const OpQuery&)> measure;
  // "" when the kernel can run `algorithm` (a configuration it reported in a decision) for
  // the query, else why not; null = the kernel takes no algorithm (lock entries naming one
  // are rejected).
  std::function<std::string(const OpQuery&, const std::vector<std::pair<std::string, std::int64_t>>&)>
      check_algorithm;
};

class KernelRegistry {
 public:
  static KernelRegistry& instance();

  void add(KernelDef def);  // replaces a kernel of the same op and name
  std::vector<std::string> ops() const;
  // UnsupportedOperationError for an unknown op (with the known ops and a did-you-mean).
  const std::vector<KernelDef>& kernels(const std::string& op) const;
  // UnsupportedOperationError for an unknown kernel (with the op's kernels).
  const KernelDef& find(const std::string& op, const std::string& kernel) const;

 private:
  KernelRegistry();
  std::vector<std::vector<KernelDef>> by_op_;  // one list per op, in registration order
  std::vector<std::string> op_names_;
};

// Adds the built-in kernels (CPU reference kernels; cuBLAS/cuBLASLt in a CUDA build).
void register_builtin_kernels(KernelRegistry& registry);

}  // namespace xrt
