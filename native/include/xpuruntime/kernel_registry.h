// KernelRegistry: which kernels implement an op, in priority order, each able to say whether
// it can run a given (shape, dtype, device) and, for BestPerformance, to time itself.
#pragma once

#include <deque>
#include <functional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "xpuruntime/tensor.h"

namespace xrt {

struct OpQuery {
  std::string op;
  std::vector<std::int64_t> shape;  // op-specific: matmul [M, K, N], layernorm x's shape
  DType dtype = DType::F32;
  DeviceRef device;
};

// Inputs/outputs of one kernel call; scalars carry op parameters (layernorm's eps).
struct KernelCall {
  std::vector<const Tensor*> inputs;
  std::vector<double> scalars;
  Tensor* output = nullptr;
  void* stream = nullptr;
  // Further results of ops with several (norm statistics); null entries are not wanted.
  std::vector<Tensor*> extra_outputs;
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
};

// Kernels are added at start-up (built-ins) and by the Python bindings when a Python module
// registers its kernels (xpuruntime.kernels). Adding never moves a registered KernelDef, so the
// Dispatcher's cached decisions keep pointing at valid kernels; register an op's kernels
// before resolving that op from several threads.
class KernelRegistry {
 public:
  static KernelRegistry& instance();

  void add(KernelDef def);  // replaces a kernel of the same op and name
  std::vector<std::string> ops() const;
  // UnsupportedOperationError for an unknown op (with the known ops and a did-you-mean).
  const std::deque<KernelDef>& kernels(const std::string& op) const;
  // UnsupportedOperationError for an unknown kernel (with the op's kernels).
  const KernelDef& find(const std::string& op, const std::string& kernel) const;

 private:
  KernelRegistry();
  // Deques: growth never relocates existing entries (decisions hold KernelDef pointers).
  std::deque<std::deque<KernelDef>> by_op_;  // one list per op, in registration order
  std::deque<std::string> op_names_;
  mutable std::shared_mutex mutex_;  // guards growth against concurrent lookups
};

// Adds the built-in kernels (CPU reference kernels; cuBLAS/cuBLASLt in a CUDA build).
void register_builtin_kernels(KernelRegistry& registry);

}  // namespace xrt
