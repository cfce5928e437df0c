#include <cmath>

#include "check.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/microbench.h"
#include "xpuruntime/ops.h"

using namespace xrt;

namespace {
const DeviceRef kCpu{DeviceKind::CPU, 0};
OpQuery matmul_query(DType dtype = DType::F32) { return {"matmul", {4, 8, 2}, dtype, kCpu}; }
}  // namespace

XRT_TEST(auto_first_supported_picks_cpu_and_logs_reason) {
  Dispatcher& d = Dispatcher::instance();
  d.clear();
  auto decision = d.resolve(matmul_query(), "", Mode::Auto, Strategy::FirstSupported);
  CHECK(decision->kernel == "cpu");
  CHECK(decision->reason.find("first supported") != std::string::npos);
  // cuBLAS kernels are registered before cpu and were skipped with their reason.
  CHECK(decision->reason.find("cublasLt") != std::string::npos);
  CHECK(d.decisions().size() == 1);
}

XRT_TEST(cached_resolution_returns_same_decision_without_logging) {
  Dispatcher& d = Dispatcher::instance();
  d.clear();
  auto first = d.resolve(matmul_query(), "", Mode::Auto, Strategy::FirstSupported);
  auto again = d.resolve(matmul_query(), "", Mode::Auto, Strategy::FirstSupported);
  CHECK(first.get() == again.get());
  CHECK(d.cache_hits() == 1);
  CHECK(d.decisions().size() == 1);
  // A different shape is a different entry.
  OpQuery other = matmul_query();
  other.shape = {5, 8, 2};
  CHECK(d.resolve(other, "", Mode::Auto, Strategy::FirstSupported).get() != first.get());
  CHECK(d.cache_size() == 2);
}

XRT_TEST(pin_that_cannot_run_raises_unsupported) {
  CHECK_THROWS(UnsupportedOperationError,
               Dispatcher::instance().resolve(matmul_query(), "cublasLt", Mode::Pin,
                                              Strategy::FirstSupported),
               "pins matmul to 'cublasLt'");
  CHECK_THROWS(UnsupportedOperationError,
               Dispatcher::instance().resolve(matmul_query(DType::F16), "cpu", Mode::Pin,
                                              Strategy::FirstSupported),
               "float32/float64 only");
}

XRT_TEST(prefer_falls_back_with_reason) {
  auto d = Dispatcher::instance().resolve(matmul_query(), "cublas", Mode::Prefer,
                                          Strategy::FirstSupported);
  CHECK(d->kernel == "cpu");
  CHECK(d->reason.find("preferred 'cublas' cannot run") != std::string::npos);
}

XRT_TEST(unknown_op_and_kernel_suggest_names) {
  CHECK_THROWS(UnsupportedOperationError,
               Dispatcher::instance().resolve({"matmull", {1, 1, 1}, DType::F32, kCpu}, "",
                                              Mode::Auto, Strategy::FirstSupported),
               "did you mean 'matmul'");
  CHECK_THROWS(UnsupportedOperationError,
               Dispatcher::instance().resolve(matmul_query(), "cublaslt", Mode::Pin,
                                              Strategy::FirstSupported),
               "did you mean 'cublasLt'");
}

XRT_TEST(best_performance_measures_and_caches) {
  Dispatcher& d = Dispatcher::instance();
  d.clear();
  auto decision = d.resolve({"matmul", {64, 64, 64}, DType::F32, kCpu}, "", Mode::Auto,
                            Strategy::BestPerformance);
  CHECK(decision->kernel == "cpu");  // the only CPU candidate
  CHECK(d.decisions().size() == 1);
}

XRT_TEST(cached_resolve_is_cheap) {
  const double ns = cached_resolve_ns(matmul_query(), "", Mode::Auto, Strategy::FirstSupported,
                                      200000);
  std::printf("  cached resolve: %.1f ns\n", ns);
  CHECK(ns < 500.0);
}

XRT_TEST(cpu_matmul_and_layernorm_compute_reference_results) {
  Tensor a = Tensor::empty({2, 3}, DType::F32, kCpu);
  Tensor b = Tensor::empty({3, 2}, DType::F32, kCpu);
  auto* pa = static_cast<float*>(a.data);
  auto* pb = static_cast<float*>(b.data);
  for (int i = 0; i < 6; ++i) {
    pa[i] = static_cast<float>(i + 1);  // [[1,2,3],[4,5,6]]
    pb[i] = static_cast<float>(6 - i);  // [[6,5],[4,3],[2,1]]
  }
  OpResult r = matmul(a, b, {}, nullptr);
  const auto* c = static_cast<const float*>(r.output.data);
  CHECK(c[0] == 20 && c[1] == 14 && c[2] == 56 && c[3] == 41);
  CHECK_THROWS(InvalidArgumentError, matmul(a, a, {}, nullptr), "inner dimensions differ");

  Tensor x = Tensor::empty({1, 4}, DType::F64, kCpu);
  Tensor w = Tensor::empty({4}, DType::F64, kCpu);
  Tensor bias = Tensor::empty({4}, DType::F64, kCpu);
  for (int i = 0; i < 4; ++i) {
    static_cast<double*>(x.data)[i] = i;
    static_cast<double*>(w.data)[i] = 1;
    static_cast<double*>(bias.data)[i] = 0.5;
  }
  OpResult ln = layernorm(x, w, bias, 1e-12, {}, nullptr);
  const auto* y = static_cast<const double*>(ln.output.data);
  // mean 1.5, var 1.25: (0 - 1.5) / sqrt(1.25) + 0.5
  CHECK(std::abs(y[0] - (-1.5 / std::sqrt(1.25) + 0.5)) < 1e-9);
}

XRT_TEST(layout_text_round_trips) {
  const std::uint32_t plain = layout::kGemm;
  CHECK(layout_text(plain) == "NN");
  CHECK(layout_text(0) == "");
  const std::uint32_t v = with_epilogue(layout::kGemm | layout::kTransA | layout::kTf32,
                                        Epilogue::GeluAuxBias);
  CHECK(layout_text(v) == "TN+GELU_AUX_BIAS:tf32");
  for (std::uint32_t x : {plain, v, layout::kGemm | layout::kStridedB,
                          with_epilogue(layout::kGemm | layout::kTransB, Epilogue::BGradB)}) {
    CHECK(layout_from_text(layout_text(x)) == x);
  }
  CHECK_THROWS(InvalidArgumentError, layout_from_text("NQ"), "malformed layout");
  CHECK_THROWS(InvalidArgumentError, layout_from_text("NN+SWISH"), "malformed layout");
}

XRT_TEST(replay_honours_the_lock_and_reports_the_rest) {
  Dispatcher& d = Dispatcher::instance();
  LockEntry entry{matmul_query(), "cpu", {}};
  CHECK(d.set_lock(LockMode::Replay, {entry}).empty());
  auto locked = d.resolve(matmul_query(), "", Mode::Auto, Strategy::FirstSupported);
  CHECK(locked->status() == DecisionStatus::Locked);
  CHECK(locked->kernel == "cpu");
  OpQuery missing = matmul_query();
  missing.shape = {9, 9, 9};
  auto fresh = d.resolve(missing, "", Mode::Auto, Strategy::FirstSupported);
  CHECK(fresh->status() == DecisionStatus::FallenBack);
  const auto problems = d.take_lock_problems();
  CHECK(problems.size() == 1 && problems[0].reason == "not in the lock");
  LockEntry bad{matmul_query(DType::F64), "cublasLt", {}};
  CHECK(d.set_lock(LockMode::Replay, {bad}).size() == 1);
  d.set_lock(LockMode::Off, {});
  CHECK(d.lock_problems().empty());
}

XRT_TEST_MAIN()
