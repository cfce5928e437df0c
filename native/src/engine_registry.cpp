#include "xpuruntime/engine_registry.h"

#include <algorithm>

#include "xpuruntime/errors.h"

namespace xrt {

EngineRegistry& EngineRegistry::instance() {
  static EngineRegistry registry;
  return registry;
}

void EngineRegistry::add(const std::string& name, Capabilities capabilities) {
  if (name.empty()) throw InvalidArgumentError("engine name must not be empty");
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& e : engines_) {
    if (e.name == name) {
      e.capabilities = std::move(capabilities);
      return;
    }
  }
  engines_.push_back(EngineEntry{name, std::move(capabilities)});
}

bool EngineRegistry::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(engines_.begin(), engines_.end(),
                         [&](const EngineEntry& e) { return e.name == name; });
  if (it == engines_.end()) return false;
  engines_.erase(it);
  return true;
}

EngineEntry EngineRegistry::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& e : engines_) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  const std::string hint = closest_name(name, names);
  throw InvalidArgumentError(
      "no engine '" + name + "' is registered" +
      (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; registered engines: " +
      (names.empty() ? std::string("none (engine plugins register when they are loaded)")
                     : join_names(names)));
}

std::vector<EngineEntry> EngineRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return engines_;
}

std::vector<std::string> EngineRegistry::find(const Capabilities& required) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& e : engines_) {
    bool ok = true;
    for (const auto& [key, values] : required) {
      auto it = e.capabilities.find(key);
      if (it == e.capabilities.end()) {
        ok = false;
        break;
      }
      for (const auto& v : values) {
        if (std::find(it->second.begin(), it->second.end(), v) == it->second.end()) {
          ok = false;
          break;
        }
      }
      if (!ok) break;
    }
    if (ok) out.push_back(e.name);
  }
  return out;
}

}  // namespace xrt
