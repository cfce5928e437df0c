#include "xpuruntime/kernel_registry.h"

#include <mutex>

#include "xpuruntime/errors.h"

namespace xrt {

KernelRegistry::KernelRegistry() { register_builtin_kernels(*this); }

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelDef def) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  for (std::size_t i = 0; i < op_names_.size(); ++i) {
    if (op_names_[i] != def.op) continue;
    for (auto& existing : by_op_[i]) {
      if (existing.name == def.name) {
        existing = std::move(def);
        return;
      }
    }
    by_op_[i].push_back(std::move(def));
    return;
  }
  op_names_.push_back(def.op);
  by_op_.push_back({std::move(def)});
}

std::vector<std::string> KernelRegistry::ops() const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return {op_names_.begin(), op_names_.end()};
}

const std::deque<KernelDef>& KernelRegistry::kernels(const std::string& op) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  for (std::size_t i = 0; i < op_names_.size(); ++i) {
    if (op_names_[i] == op) return by_op_[i];
  }
  const std::vector<std::string> names(op_names_.begin(), op_names_.end());
  const std::string hint = closest_name(op, names);
  throw UnsupportedOperationError("unknown op '" + op + "'" +
                                  (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                                  "; ops with registered kernels: " + join_names(names));
}

const KernelDef& KernelRegistry::find(const std::string& op, const std::string& kernel) const {
  const auto& defs = kernels(op);
  std::vector<std::string> names;
  for (const auto& d : defs) {
    if (d.name == kernel) return d;
    names.push_back(d.name);
  }
  const std::string hint = closest_name(kernel, names);
  throw UnsupportedOperationError("unknown kernel '" + kernel + "' for op '" + op + "'" +
                                  (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                                  "; kernels registered for " + op + ": " + join_names(names));
}

}  // namespace xrt
