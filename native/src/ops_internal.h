// Helpers shared by the op implementations (ops.cpp, ops_linear.cpp).
#pragma once

#include <string>

#include "xpuruntime/ops.h"

namespace xrt::detail {

// InvalidArgumentError when a and b differ in dtype or device.
void require_same(const Tensor& a, const Tensor& b, const char* op, const char* an,
                  const char* bn);
// UnsupportedOperationError naming .contiguous() when `t` is not contiguous.
void require_contiguous(const Tensor& t, const char* op, const char* name);
// Resolves `query` once, allocates nothing before a pin that cannot run has raised, runs the
// kernel on `call` (outputs allocated by `allocate` after resolution) and records the call as
// this thread's last one.
template <typename Allocate>
OpResult run_op(const OpQuery& query, const PolicyChoice& policy, KernelCall call,
                Allocate&& allocate);
void note_last_call(const std::shared_ptr<const Decision>& decision, const std::string& detail);
const LastCall& last_call();

}  // namespace xrt::detail

#include "xpuruntime/profiler.h"

namespace xrt::detail {

template <typename Allocate>
OpResult run_op(const OpQuery& query, const PolicyChoice& policy, KernelCall call,
                Allocate&& allocate) {
  OpResult result;
  result.decision = Dispatcher::instance().resolve(query, policy);
  allocate(result);  // fills result.output (and result.extra)
  call.output = &result.output;
  for (Tensor& t : result.extra) call.extra_outputs.push_back(&t);
  call.decision = result.decision.get();
  call.variant = query.variant;
  Profiler& profiler = Profiler::instance();
  const std::uint64_t start = profiler.begin_range(result.decision->range);
  result.detail = result.decision->def->run(call);
  profiler.end_range(result.decision->range, "op", start);
  note_last_call(result.decision, result.detail);
  return result;
}

}  // namespace xrt::detail
