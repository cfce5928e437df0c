#include "xpuruntime/profiler.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#if XPURUNTIME_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace xrt {

// A slot is guarded by a one-byte spin flag held only while an event is copied in or out,
// so recording never takes a shared lock and readers never see a half-written event.
struct Profiler::Slot {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  std::uint64_t sequence = 0;  // 0: empty; otherwise claim index + 1
  TraceEvent event;
};

namespace {
struct SlotGuard {
  explicit SlotGuard(std::atomic_flag& f) : flag(f) {
    while (flag.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SlotGuard() { flag.clear(std::memory_order_release); }
  std::atomic_flag& flag;
};

std::uint32_t thread_id() {
  thread_local const auto tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}
}  // namespace

Profiler::Profiler(std::size_t capacity) : capacity_(capacity), slots_(new Slot[capacity]) {}

Profiler& Profiler::instance() {
  static Profiler profiler(1 << 16);
  return profiler;
}

std::uint64_t Profiler::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void Profiler::record(TraceEvent event) {
  const std::uint64_t index = next_.fetch_add(1, std::memory_order_relaxed);
  Slot& slot = slots_[index % capacity_];
  SlotGuard guard(slot.busy);
  slot.sequence = index + 1;
  slot.event = std::move(event);
}

void Profiler::clear() {
  for (std::size_t i = 0; i < capacity_; ++i) {
    SlotGuard guard(slots_[i].busy);
    slots_[i].sequence = 0;
  }
  next_.store(0, std::memory_order_relaxed);
}

std::uint64_t Profiler::dropped() const {
  const std::uint64_t n = next_.load(std::memory_order_relaxed);
  return n > capacity_ ? n - capacity_ : 0;
}

std::uint64_t Profiler::begin_range(const std::string& name) {
#if XPURUNTIME_WITH_NVTX
  nvtxRangePushA(name.c_str());
#else
  (void)name;
#endif
  return now_ns();
}

void Profiler::end_range(const std::string& name, const std::string& category,
                         std::uint64_t start_ns, const std::string& args_json) {
  const std::uint64_t end = now_ns();
#if XPURUNTIME_WITH_NVTX
  nvtxRangePop();
#endif
  if (!enabled()) return;
  TraceEvent e;
  e.name = name;
  e.category = category;
  e.phase = 'X';
  e.ts_us = static_cast<double>(start_ns) / 1000.0;
  e.dur_us = static_cast<double>(end - start_ns) / 1000.0;
  e.pid = static_cast<std::uint32_t>(::getpid());
  e.tid = thread_id();
  e.args_json = args_json;
  record(std::move(e));
}

void Profiler::instant(const std::string& name, const std::string& category,
                       const std::string& args_json) {
#if XPURUNTIME_WITH_NVTX
  nvtxMarkA(name.c_str());
#endif
  if (!enabled()) return;
  TraceEvent e;
  e.name = name;
  e.category = category;
  e.phase = 'i';
  e.ts_us = static_cast<double>(now_ns()) / 1000.0;
  e.pid = static_cast<std::uint32_t>(::getpid());
  e.tid = thread_id();
  e.args_json = args_json;
  record(std::move(e));
}

std::vector<TraceEvent> Profiler::events() const {
  const std::uint64_t end = next_.load(std::memory_order_acquire);
  const std::uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  std::vector<TraceEvent> out;
  out.reserve(static_cast<std::size_t>(end - begin));
  for (std::uint64_t i = begin; i < end; ++i) {
    Slot& slot = slots_[i % capacity_];
    SlotGuard guard(slot.busy);
    if (slot.sequence == i + 1) out.push_back(slot.event);
  }
  return out;
}

ScopedRange::ScopedRange(std::string name, std::string category)
    : name_(std::move(name)), category_(std::move(category)),
      start_(Profiler::instance().begin_range(name_)) {}

ScopedRange::~ScopedRange() { Profiler::instance().end_range(name_, category_, start_); }

}  // namespace xrt
