#include "xpuruntime/dispatcher.h"

#include <cstdio>
#include <limits>

#include "xpuruntime/checked.h"
#include "xpuruntime/errors.h"

namespace xrt {

namespace {
constexpr const char* kModeNames[] = {"pin", "prefer", "auto"};
constexpr const char* kStatusNames[] = {"decided", "locked", "fallen_back"};
constexpr const char* kLockModeNames[] = {"off", "record", "replay"};
constexpr const char* kEpilogueNames[] = {
    "",      "BIAS",          "RELU",  "RELU_BIAS",   "GELU",   "GELU_BIAS",
    "GELU_AUX", "GELU_AUX_BIAS", "DGELU", "DGELU_BGRAD", "BGRADA", "BGRADB"};
constexpr int kEpilogues = sizeof kEpilogueNames / sizeof kEpilogueNames[0];

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", ms);
  return buf;
}

std::uint64_t fnv_mix(std::uint64_t h, std::uint64_t v) {
  h ^= v;
  return h * 1099511628211ULL;
}

// A decision for `q` with its text fields filled and no kernel yet.
std::shared_ptr<Decision> blank_decision(const OpQuery& q, Mode mode, Strategy strategy,
                                         DecisionStatus status) {
  auto d = std::make_shared<Decision>(status);
  d->query = q;
  d->op = q.op;
  d->shape = dims_text(q.shape);
  d->dtype = dtype_name(q.dtype);
  d->device = q.device.str();
  d->layout = layout_text(q.variant);
  d->mode = mode_name(mode);
  d->strategy = strategy_name(strategy);
  return d;
}
}  // namespace

const char* mode_name(Mode mode) { return kModeNames[static_cast<int>(mode)]; }
const char* strategy_name(Strategy s) {
  return s == Strategy::FirstSupported ? "FirstSupported" : "BestPerformance";
}
const char* status_name(DecisionStatus s) { return kStatusNames[static_cast<int>(s)]; }
const char* lock_mode_name(LockMode m) { return kLockModeNames[static_cast<int>(m)]; }

const char* epilogue_name(Epilogue e) {
  const int i = static_cast<int>(e);
  return i < kEpilogues ? kEpilogueNames[i] : "UNKNOWN";
}

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

LockMode lock_mode_from_name(const std::string& name) {
  for (int i = 0; i < 3; ++i) {
    if (name == kLockModeNames[i]) return static_cast<LockMode>(i);
  }
  throw InvalidArgumentError("unknown lock mode '" + name + "'; valid modes: off, record, replay");
}

std::string layout_text(std::uint32_t variant) {
  if (!(variant & layout::kGemm)) return "";
  auto operand = [variant](std::uint32_t trans, std::uint32_t strided) {
    return (variant & strided) ? 'S' : (variant & trans) ? 'T' : 'N';
  };
  std::string s{operand(layout::kTransA, layout::kStridedA),
                operand(layout::kTransB, layout::kStridedB)};
  const Epilogue e = epilogue_of(variant);
  if (e != Epilogue::None) s += std::string("+") + epilogue_name(e);
  if (variant & layout::kTf32) s += ":tf32";
  return s;
}

std::uint32_t layout_from_text(const std::string& text) {
  if (text.empty()) return 0;
  auto bad = [&text]() {
    return InvalidArgumentError(
        "malformed layout '" + text +
        "'; expected two of N/T/S (how a and b are stored), then optionally +EPILOGUE "
        "(BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, "
        "BGRADA, BGRADB) and :tf32, for example 'TN+GELU_BIAS'");
  };
  if (text.size() < 2) throw bad();
  std::uint32_t v = layout::kGemm;
  auto operand = [&](char c, std::uint32_t trans, std::uint32_t strided) {
    if (c == 'T') v |= trans;
    else if (c == 'S') v |= strided;
    else if (c != 'N') throw bad();
  };
  operand(text[0], layout::kTransA, layout::kStridedA);
  operand(text[1], layout::kTransB, layout::kStridedB);
  std::string rest = text.substr(2);
  const std::string tf32 = ":tf32";
  if (rest.size() >= tf32.size() && rest.compare(rest.size() - tf32.size(), tf32.size(), tf32) == 0) {
    v |= layout::kTf32;
    rest.resize(rest.size() - tf32.size());
  }
  if (!rest.empty()) {
    if (rest[0] != '+') throw bad();
    const std::string name = rest.substr(1);
    int found = -1;
    for (int i = 1; i < kEpilogues; ++i) {
      if (name == kEpilogueNames[i]) found = i;
    }
    if (found < 0) throw bad();
    v = with_epilogue(v, static_cast<Epilogue>(found));
  }
  return v;
}

// ---- Decision ---------------------------------------------------------------------------

void Decision::set_notes(DecisionNotes notes) const {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  if (notes_.written) return;
  notes_ = std::move(notes);
  notes_.written = true;
  has_notes_.store(true, std::memory_order_release);
}

DecisionNotes Decision::notes() const {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  return notes_;
}

void Decision::fall_back(const std::string& why) const {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  status_.store(DecisionStatus::FallenBack, std::memory_order_release);
  notes_.detail = why + (notes_.detail.empty() ? "" : "; " + notes_.detail);
}

// ---- signatures ---------------------------------------------------------------------------

std::uint64_t signature_hash(const OpQuery& q) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a; no allocation on the lookup path
  for (char c : q.op) h = fnv_mix(h, static_cast<unsigned char>(c));
  h = fnv_mix(h, 0xff);
  for (auto s : q.shape) h = fnv_mix(h, static_cast<std::uint64_t>(s));
  h = fnv_mix(h, static_cast<std::uint64_t>(q.dtype) << 8 | static_cast<std::uint64_t>(q.device.kind));
  h = fnv_mix(h, static_cast<std::uint64_t>(q.device.index));
  return fnv_mix(h, q.variant);
}

bool same_signature(const OpQuery& a, const OpQuery& b) {
  return a.dtype == b.dtype && a.device == b.device && a.variant == b.variant &&
         a.shape == b.shape && a.op == b.op;
}

// ---- Dispatcher -----------------------------------------------------------------------------

Dispatcher& Dispatcher::instance() {
  static Dispatcher* dispatcher = new Dispatcher();  // lives to exit: kernels hold decisions
  return *dispatcher;
}

std::uint64_t Dispatcher::hash_of(const OpQuery& q, const std::string& kernel, Mode mode,
                                  Strategy strategy) {
  std::uint64_t h = signature_hash(q);
  for (char c : kernel) h = fnv_mix(h, static_cast<unsigned char>(c));
  return fnv_mix(h, static_cast<std::uint64_t>(mode) << 8 | static_cast<std::uint64_t>(strategy));
}

bool Dispatcher::matches(const Key& k, const OpQuery& q, const std::string& kernel, Mode mode,
                         Strategy strategy) {
  return k.mode == mode && k.strategy == strategy && same_signature(k.query, q) &&
         k.kernel == kernel;
}

std::shared_ptr<const Decision> Dispatcher::resolve(const OpQuery& query,
                                                    const PolicyChoice& choice) {
  return resolve(query, choice.kernel, choice.mode, choice.strategy);
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
  std::shared_ptr<Decision> fresh = lock_mode() == LockMode::Replay
                                        ? decide_locked(query, kernel, mode, strategy)
                                        : decide(query, kernel, mode, strategy);
  fresh->range = "xrt::" + query.op + "[" + fresh->kernel + "]";
  std::shared_ptr<const Decision> decision = std::move(fresh);
  {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    auto& bucket = cache_[h];
    for (const Entry& e : bucket) {
      if (matches(e.key, query, kernel, mode, strategy)) return e.decision;  // lost a race
    }
    bucket.push_back(Entry{Key{query, kernel, mode, strategy}, decision});
  }
  std::lock_guard<std::mutex> lock(log_mutex_);
  log_.push_back(decision);
  return decision;
}

std::shared_ptr<Decision> Dispatcher::decide(const OpQuery& q, const std::string& kernel,
                                             Mode mode, Strategy strategy) {
  const KernelRegistry& registry = KernelRegistry::instance();
  const auto& defs = registry.kernels(q.op);  // unknown op -> UnsupportedOperationError
  auto d = blank_decision(q, mode, strategy, DecisionStatus::Decided);
  auto choose = [&d](const KernelDef& def, std::string reason) {
    d->kernel = def.name;
    d->library = def.library;
    d->def = &def;
    d->reason = std::move(reason);
  };
  const std::string what = q.op + " " + d->dtype + " " + d->shape +
                           (d->layout.empty() ? "" : " (" + d->layout + ")") + " on " + d->device;

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
    d = blank_decision(q, mode, strategy, DecisionStatus::FallenBack);
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
    d->candidates.push_back(TimedCandidate{def->name, {}, -1, ms});
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

std::shared_ptr<Decision> Dispatcher::decide_locked(const OpQuery& q, const std::string& kernel,
                                                    Mode mode, Strategy strategy) {
  std::shared_ptr<const LockEntry> entry;
  {
    std::lock_guard<std::mutex> lock(lock_mutex_);
    auto it = lock_table_.find(signature_hash(q));
    if (it != lock_table_.end()) {
      for (const auto& e : it->second) {
        if (same_signature(e->signature, q)) entry = e;
      }
    }
  }
  std::string why_not;
  if (entry == nullptr) {
    why_not = "not in the lock";
  } else {
    try {
      const KernelDef& def = KernelRegistry::instance().find(q.op, entry->kernel);
      why_not = def.unsupported_reason(q);
      if (why_not.empty()) {
        auto d = blank_decision(q, mode, strategy, DecisionStatus::Locked);
        d->kernel = def.name;
        d->library = def.library;
        d->def = &def;
        d->locked = entry;
        d->reason = "replayed from the lock" +
                    std::string(entry->algorithm.empty() ? "" : " with its algorithm");
        return d;
      }
      why_not = "locked kernel '" + entry->kernel + "' cannot run here: " + why_not;
    } catch (const Error& e) {
      why_not = std::string("locked kernel cannot be used: ") + e.what();
    }
  }
  report_lock_problem(LockProblem{q, entry ? entry->kernel : "", why_not});
  std::shared_ptr<Decision> fresh = decide(q, kernel, mode, strategy);
  auto d = blank_decision(q, mode, strategy, DecisionStatus::FallenBack);
  d->kernel = fresh->kernel;
  d->library = fresh->library;
  d->def = fresh->def;
  d->candidates = fresh->candidates;
  d->reason = "lock replay: " + why_not + "; decided now: " + fresh->reason;
  return d;
}

std::vector<std::shared_ptr<const Decision>> Dispatcher::decisions() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return log_;
}

std::vector<std::shared_ptr<const Decision>> Dispatcher::cached() const {
  std::vector<std::shared_ptr<const Decision>> out;
  std::shared_lock<std::shared_mutex> lock(cache_mutex_);
  for (const auto& [h, bucket] : cache_) {
    for (const Entry& e : bucket) out.push_back(e.decision);
  }
  return out;
}

void Dispatcher::on_clear(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(log_mutex_);
  clear_hooks_.push_back(std::move(hook));
}

void Dispatcher::clear() {
  {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    cache_.clear();
  }
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    log_.clear();
    hooks = clear_hooks_;
  }
  for (auto& hook : hooks) hook();
  hits_.store(0, std::memory_order_relaxed);
}

std::size_t Dispatcher::cache_size() const {
  std::shared_lock<std::shared_mutex> lock(cache_mutex_);
  std::size_t n = 0;
  for (const auto& [h, bucket] : cache_) n += bucket.size();
  return n;
}

std::vector<LockProblem> Dispatcher::set_lock(LockMode mode, std::vector<LockEntry> entries) {
  std::vector<LockProblem> problems;
  std::unordered_map<std::uint64_t, std::vector<std::shared_ptr<const LockEntry>>> table;
  if (mode == LockMode::Replay) {
    const KernelRegistry& registry = KernelRegistry::instance();
    for (auto& e : entries) {
      std::string why_not;
      try {
        const KernelDef& def = registry.find(e.signature.op, e.kernel);
        why_not = def.unsupported_reason(e.signature);
        if (why_not.empty() && !e.algorithm.empty()) {
          why_not = def.check_algorithm
                        ? def.check_algorithm(e.signature, e.algorithm)
                        : "kernel '" + e.kernel + "' takes no algorithm configuration";
          if (!why_not.empty()) why_not = "locked algorithm rejected: " + why_not;
        } else if (!why_not.empty()) {
          why_not = "locked kernel '" + e.kernel + "' cannot run here: " + why_not;
        }
      } catch (const Error& err) {
        why_not = err.what();
      }
      if (!why_not.empty()) problems.push_back(LockProblem{e.signature, e.kernel, why_not});
      const std::uint64_t h = signature_hash(e.signature);
      table[h].push_back(std::make_shared<const LockEntry>(std::move(e)));
    }
  }
  {
    std::lock_guard<std::mutex> lock(lock_mutex_);
    lock_table_ = std::move(table);
    lock_problems_ = problems;
    lock_mode_.store(mode, std::memory_order_release);
  }
  {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    cache_.clear();  // decisions made under another mode must be made again
  }
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    hooks = clear_hooks_;
  }
  for (auto& hook : hooks) hook();
  return problems;
}

std::vector<LockProblem> Dispatcher::lock_problems() const {
  std::lock_guard<std::mutex> lock(lock_mutex_);
  return lock_problems_;
}

std::vector<LockProblem> Dispatcher::take_lock_problems() {
  std::lock_guard<std::mutex> lock(lock_mutex_);
  std::vector<LockProblem> out;
  out.swap(lock_problems_);
  return out;
}

void Dispatcher::report_lock_problem(LockProblem problem) {
  std::lock_guard<std::mutex> lock(lock_mutex_);
  lock_problems_.push_back(std::move(problem));
}

}  // namespace xrt
