// Dispatcher: resolves (op, shape, dtype, device) to one kernel under a kernel policy entry.
//
//   pin    the named kernel must run; UnsupportedOperationError when it cannot;
//   prefer the named kernel when it can run, otherwise auto (the reason says why);
//   auto   FirstSupported (registration order) or BestPerformance (each supported kernel
//          timed once on the first query of a shape, the fastest cached).
// Every new resolution is logged with its reason; repeated queries are a hash lookup under a
// shared lock, returning the cached decision.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

enum class Mode : std::uint8_t { Pin, Prefer, Auto };
enum class Strategy : std::uint8_t { FirstSupported, BestPerformance };

const char* mode_name(Mode mode);
Mode mode_from_name(const std::string& name);          // InvalidArgumentError with choices
Strategy strategy_from_name(const std::string& name);  // InvalidArgumentError with choices

struct Decision {
  std::string op;
  std::string kernel;
  std::string library;
  std::string mode;
  std::string reason;
  std::string shape;
  std::string dtype;
  std::string device;
  const KernelDef* def = nullptr;
};

struct DecisionLogEntry {
  Decision decision;
  std::string detail;  // e.g. the algorithm a library picked, logged by the kernel
};

class Dispatcher {
 public:
  static Dispatcher& instance();

  // `kernel` is the policy's kernel for the op ("" when the policy says nothing: auto).
  std::shared_ptr<const Decision> resolve(const OpQuery& query, const std::string& kernel,
                                          Mode mode, Strategy strategy);
  // Adds an entry to the decision log (kernels use it for the algorithm they pick).
  void log(const Decision& decision, const std::string& detail = "");
  std::vector<DecisionLogEntry> decisions() const;
  void clear();  // forgets cached resolutions and the log
  std::uint64_t cache_hits() const { return hits_.load(std::memory_order_relaxed); }
  std::size_t cache_size() const;

 private:
  Dispatcher() = default;
  struct Key {
    std::string op;
    std::vector<std::int64_t> shape;
    DType dtype;
    DeviceRef device;
    std::string kernel;
    Mode mode;
    Strategy strategy;
  };
  struct Entry {
    Key key;
    std::shared_ptr<const Decision> decision;
  };
  static std::uint64_t hash_of(const OpQuery& q, const std::string& kernel, Mode mode,
                               Strategy strategy);
  static bool matches(const Key& k, const OpQuery& q, const std::string& kernel, Mode mode,
                      Strategy strategy);
  Decision decide(const OpQuery& query, const std::string& kernel, Mode mode,
                  Strategy strategy) const;

  mutable std::shared_mutex cache_mutex_;
  std::unordered_map<std::uint64_t, std::vector<Entry>> cache_;
  mutable std::mutex log_mutex_;
  std::vector<DecisionLogEntry> log_;
  std::atomic<std::uint64_t> hits_{0};
};

}  // namespace xrt
