// Dispatcher: resolves (op, shape, dtype, device, layout) to one kernel under a kernel policy
// entry.
//
//   pin    the named kernel must run; UnsupportedOperationError when it cannot;
//   prefer the named kernel when it can run, otherwise auto (the reason says why);
//   auto   FirstSupported (registration order) or BestPerformance (each supported kernel
//          timed once on the first query of a shape, the fastest cached).
//
// Repeated queries are a hash lookup under a shared lock returning the cached decision (a
// shared pointer: nothing is formatted or copied per call). Every new decision is appended to
// the decision log; its text fields are filled once, when it is made. Kernels add what they
// chose inside the decision (the cuBLASLt algorithm, its timed candidates) through notes().
//
// Lock hooks (the decision lockfile): in mode Replay a signature present in the lock resolves
// to exactly the locked kernel (status Locked, nothing timed) and carries the locked
// algorithm to the kernel; a locked choice that cannot be honoured, or a signature missing
// from the lock, is decided afresh with status FallenBack and reported through
// lock_problems(), where the Python layer applies the fallback mode.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

enum class Mode : std::uint8_t { Pin, Prefer, Auto };
enum class Strategy : std::uint8_t { FirstSupported, BestPerformance };
enum class DecisionStatus : std::uint8_t { Decided, Locked, FallenBack };
enum class LockMode : std::uint8_t { Off, Record, Replay };

const char* mode_name(Mode mode);
const char* strategy_name(Strategy strategy);
const char* status_name(DecisionStatus status);
const char* lock_mode_name(LockMode mode);
Mode mode_from_name(const std::string& name);          // InvalidArgumentError with choices
Strategy strategy_from_name(const std::string& name);  // InvalidArgumentError with choices
LockMode lock_mode_from_name(const std::string& name);  // InvalidArgumentError with choices

// What a kernel policy asks of one op, resolved once (the Python layer caches one per
// KernelPolicy content) so that a call carries no strings to parse.
struct PolicyChoice {
  std::string kernel;  // "" = auto
  Mode mode = Mode::Auto;
  Strategy strategy = Strategy::FirstSupported;
  bool allow_tf32 = false;  // precision "tf32": fp32 GEMMs may use TF32 tensor cores
};

// An algorithm configuration as plain named integers (cuBLASLt: algo_id, tile, stages, ...).
using AlgorithmConfig = std::vector<std::pair<std::string, std::int64_t>>;

// One timed candidate: a kernel (BestPerformance among kernels) or an algorithm of one
// kernel (heuristic rank `rank`), with its time.
struct TimedCandidate {
  std::string kernel;         // set for kernel candidates
  AlgorithmConfig algorithm;  // set for algorithm candidates
  int rank = -1;              // heuristic rank of an algorithm candidate
  double ms = 0;
};

// A locked choice from the decision lockfile.
struct LockEntry {
  OpQuery signature;
  std::string kernel;
  AlgorithmConfig algorithm;  // empty: the kernel chooses as usual
};

// What a kernel adds to a decision while running it (first plan built under it).
struct DecisionNotes {
  std::string detail;  // e.g. "cuBLASLt algo id=... tile=..., fastest of 8 candidates ..."
  AlgorithmConfig algorithm;
  std::vector<TimedCandidate> candidates;
  bool written = false;
};

struct Decision {
  OpQuery query;
  std::string kernel;
  std::string library;
  std::string mode;      // "pin", "prefer", "auto"
  std::string strategy;  // "FirstSupported", "BestPerformance"
  std::string reason;
  // Text renderings of the query, filled when the decision is made.
  std::string op, shape, dtype, device, layout;
  std::string range;  // profiler range name of a call: "xrt::matmul[cublasLt]"
  const KernelDef* def = nullptr;
  std::vector<TimedCandidate> candidates;  // BestPerformance timings among kernels
  std::shared_ptr<const LockEntry> locked;  // Replay: the entry this decision honours

  DecisionStatus status() const { return status_.load(std::memory_order_acquire); }
  // Sets the notes once (later calls do nothing); cheap to test with has_notes().
  void set_notes(DecisionNotes notes) const;
  bool has_notes() const { return has_notes_.load(std::memory_order_acquire); }
  DecisionNotes notes() const;  // a copy, for reading
  // A locked algorithm rejected by the kernel: status becomes FallenBack with the reason.
  void fall_back(const std::string& why) const;

  explicit Decision(DecisionStatus status = DecisionStatus::Decided) : status_(status) {}
  Decision(const Decision&) = delete;
  Decision& operator=(const Decision&) = delete;

 private:
  mutable std::atomic<DecisionStatus> status_;
  mutable std::atomic<bool> has_notes_{false};
  mutable std::mutex notes_mutex_;
  mutable DecisionNotes notes_;
};

// A lock entry that could not be honoured here, or a signature missing from the lock.
struct LockProblem {
  OpQuery signature;
  std::string kernel;  // the locked kernel ("" when the signature was not in the lock)
  std::string reason;
};

// Text of a query's layout code (OpQuery::variant): "NN"/"TN"/... transposes of the two
// operands ("S" for a stride BLAS cannot take), "+EPILOGUE", ":tf32"; "" for ops that are
// not GEMMs.
std::string layout_text(std::uint32_t variant);
std::uint32_t layout_from_text(const std::string& text);  // InvalidArgumentError if malformed

class Dispatcher {
 public:
  static Dispatcher& instance();

  std::shared_ptr<const Decision> resolve(const OpQuery& query, const PolicyChoice& choice);
  // `kernel` is the policy's kernel for the op ("" when the policy says nothing: auto).
  std::shared_ptr<const Decision> resolve(const OpQuery& query, const std::string& kernel,
                                          Mode mode, Strategy strategy);
  // Every new decision so far, in order.
  std::vector<std::shared_ptr<const Decision>> decisions() const;
  // Every cached decision (what the lockfile records).
  std::vector<std::shared_ptr<const Decision>> cached() const;
  void clear();  // forgets cached resolutions, the log, and kernels' cached plans
  std::uint64_t cache_hits() const { return hits_.load(std::memory_order_relaxed); }
  std::size_t cache_size() const;

  // Kernels with caches of their own (cuBLASLt plans) register a hook run by clear() and
  // set_lock(), so that no plan outlives the decisions it was chosen under.
  void on_clear(std::function<void()> hook);

  // Lock hooks. set_lock clears the cache and returns the problems found at once (entries
  // naming an unknown op or kernel, a kernel that cannot run the signature here, an
  // algorithm the kernel rejects); problems found later are added to lock_problems().
  std::vector<LockProblem> set_lock(LockMode mode, std::vector<LockEntry> entries);
  LockMode lock_mode() const { return lock_mode_.load(std::memory_order_acquire); }
  std::vector<LockProblem> lock_problems() const;
  std::vector<LockProblem> take_lock_problems();
  void report_lock_problem(LockProblem problem);

 private:
  Dispatcher() = default;
  struct Key {
    OpQuery query;
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
  std::shared_ptr<Decision> decide(const OpQuery& query, const std::string& kernel, Mode mode,
                                   Strategy strategy);
  std::shared_ptr<Decision> decide_locked(const OpQuery& query, const std::string& kernel,
                                          Mode mode, Strategy strategy);

  mutable std::shared_mutex cache_mutex_;
  std::unordered_map<std::uint64_t, std::vector<Entry>> cache_;
  mutable std::mutex log_mutex_;
  std::vector<std::shared_ptr<const Decision>> log_;
  std::vector<std::function<void()>> clear_hooks_;
  std::atomic<std::uint64_t> hits_{0};

  std::atomic<LockMode> lock_mode_{LockMode::Off};
  mutable std::mutex lock_mutex_;
  std::unordered_map<std::uint64_t, std::vector<std::shared_ptr<const LockEntry>>> lock_table_;
  std::vector<LockProblem> lock_problems_;
};

bool same_signature(const OpQuery& a, const OpQuery& b);
std::uint64_t signature_hash(const OpQuery& q);

}  // namespace xrt
