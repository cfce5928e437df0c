#include "xpuruntime/dispatcher.h"

#include <cstdio>
#include <limits>

#include "xpuruntime/errors.h"

namespace xrt {

namespace {
constexpr const char* kModeNames[] = {"pin", "prefer", "auto"};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", ms);
  return buf;
}
}  // namespace

const char* mode_name(Mode mode) { return kModeNames[static_cast<int>(mode)]; }

Mode mode_from_name(const std::string& name) {
  for (int i = 0; i < 3; ++i) {
    if (name == kModeNames[i]) return static_cast<Mode>(i);
  }
  throw InvalidArgumentError("unknown kernel policy mode '" + name +
                             "'; valid modes: pin, prefer, auto");
}

Strategy strategy_from_name(const std::string& name) {
  if (name == "FirstSupported") return Strategy::FirstSupported;
  if (name == "BestPerformance") return Strategy::BestPerformance;
  throw InvalidArgumentError("unknown auto-selection strategy '" + name +
                             "'; valid strategies: FirstSupported, BestPerformance");
}

Dispatcher& Dispatcher::instance() {
  static Dispatcher dispatcher;
  return dispatcher;
}

std::uint64_t Dispatcher::hash_of(const OpQuery& q, const std::string& kernel, Mode mode,
                                  Strategy strategy) {
  // FNV-1a over the fields; no allocation on the lookup path.
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  for (char c : q.op) mix(static_cast<unsigned char>(c));
  mix(0xff);
  for (auto s : q.shape) mix(static_cast<std::uint64_t>(s));
  mix(static_cast<std::uint64_t>(q.dtype) << 8 | static_cast<std::uint64_t>(q.device.kind));
  mix(static_cast<std::uint64_t>(q.device.index));
  for (char c : kernel) mix(static_cast<unsigned char>(c));
  mix(static_cast<std::uint64_t>(mode) << 8 | static_cast<std::uint64_t>(strategy));
  return h;
}

bool Dispatcher::matches(const Key& k, const OpQuery& q, const std::string& kernel, Mode mode,
                         Strategy strategy) {
  return k.mode == mode && k.strategy == strategy && k.dtype == q.dtype &&
         k.device == q.device && k.shape == q.shape && k.op == q.op && k.kernel == kernel;
}

std::shared_ptr<const Decision> Dispatcher::resolve(const OpQuery& query,
                                                    const std::string& kernel, Mode mode,
                                                    Strategy strategy) {
  const std::uint64_t h = hash_of(query, kernel, mode, strategy);
  {
    std::shared_lock<std::shared_mutex> lock(cache_mutex_);
    auto it = cache_.find(h);
    if (it != cache_.end()) {
      for (const Entry& e : it->second) {
        if (matches(e.key, query, kernel, mode, strategy)) {
          hits_.fetch_add(1, std::memory_order_relaxed);
          return e.decision;
        }
      }
    }
  }
  // Decide without the lock: BestPerformance runs kernels and may take milliseconds.
  auto decision = std::make_shared<const Decision>(decide(query, kernel, mode, strategy));
  {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    auto& bucket = cache_[h];
    for (const Entry& e : bucket) {
      if (matches(e.key, query, kernel, mode, strategy)) return e.decision;  // lost a race
    }
    bucket.push_back(
        Entry{Key{query.op, query.shape, query.dtype, query.device, kernel, mode, strategy},
              decision});
  }
  log(*decision);
  return decision;
}

Decision Dispatcher::decide(const OpQuery& q, const std::string& kernel, Mode mode,
                            Strategy strategy) const {
  const KernelRegistry& registry = KernelRegistry::instance();
  const auto& defs = registry.kernels(q.op);  // unknown op -> UnsupportedOperationError
  Decision d;
  d.op = q.op;
  d.shape = shape_text(q.shape);
  d.dtype = dtype_name(q.dtype);
  d.device = q.device.str();
  d.mode = mode_name(mode);
  auto choose = [&d](const KernelDef& def, std::string reason) {
    d.kernel = def.name;
    d.library = def.library;
    d.def = &def;
    d.reason = std::move(reason);
  };
  const std::string what = q.op + " " + d.dtype + " " + d.shape + " on " + d.device;

  std::string preferred_note;
  if (mode != Mode::Auto) {
    if (kernel.empty()) {
      throw InvalidArgumentError(std::string("mode '") + mode_name(mode) + "' for op '" + q.op +
                                 "' needs a kernel name");
    }
    const KernelDef& def = registry.find(q.op, kernel);  // unknown kernel -> typed error
    const std::string why_not = def.unsupported_reason(q);
    if (why_not.empty()) {
      choose(def, mode == Mode::Pin ? "pinned by the kernel policy"
                                    : "preferred by the kernel policy and supported");
      return d;
    }
    if (mode == Mode::Pin) {
      throw UnsupportedOperationError(
          "kernel policy pins " + q.op + " to '" + kernel + "', which cannot run " + what +
          ": " + why_not + ". Change the inputs, pin another kernel, or use mode='prefer' to "
          "allow a recorded fallback.");
    }
    preferred_note = "preferred '" + kernel + "' cannot run " + what + " (" + why_not + "); ";
  }

  std::string skipped;
  std::vector<const KernelDef*> candidates;
  for (const KernelDef& def : defs) {
    const std::string why_not = def.unsupported_reason(q);
    if (why_not.empty()) {
      candidates.push_back(&def);
    } else {
      skipped += (skipped.empty() ? "" : "; ") + def.name + ": " + why_not;
    }
  }
  if (candidates.empty()) {
    throw UnsupportedOperationError("no registered kernel can run " + what + " (" + skipped +
                                    ")");
  }
  const std::string skipped_note = skipped.empty() ? "" : "; skipped " + skipped;
  if (strategy == Strategy::FirstSupported || candidates.size() == 1) {
    choose(*candidates.front(), preferred_note + "first supported kernel in registration order" +
                                    skipped_note);
    return d;
  }
  const KernelDef* best = nullptr;
  double best_ms = std::numeric_limits<double>::infinity();
  std::string timings;
  for (const KernelDef* def : candidates) {
    if (!def->measure) continue;
    const double ms = def->measure(q);
    timings += (timings.empty() ? "" : ", ") + def->name + " " + format_ms(ms);
    if (ms < best_ms) {
      best_ms = ms;
      best = def;
    }
  }
  if (best == nullptr) {
    choose(*candidates.front(), preferred_note +
                                    "BestPerformance: no candidate can be timed, first "
                                    "supported kernel chosen" + skipped_note);
    return d;
  }
  choose(*best, preferred_note + "BestPerformance: fastest measured (" + timings + ")" +
                    skipped_note);
  return d;
}

void Dispatcher::log(const Decision& decision, const std::string& detail) {
  std::lock_guard<std::mutex> lock(log_mutex_);
  log_.push_back(DecisionLogEntry{decision, detail});
}

std::vector<DecisionLogEntry> Dispatcher::decisions() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return log_;
}

void Dispatcher::clear() {
  {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    cache_.clear();
  }
  std::lock_guard<std::mutex> lock(log_mutex_);
  log_.clear();
  hits_.store(0, std::memory_order_relaxed);
}

std::size_t Dispatcher::cache_size() const {
  std::shared_lock<std::shared_mutex> lock(cache_mutex_);
  std::size_t n = 0;
  for (const auto& [h, bucket] : cache_) n += bucket.size();
  return n;
}

}  // namespace xrt
