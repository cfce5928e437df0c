// Profiler: ranges and instant events into a fixed ring buffer (slots claimed with one atomic
// increment, no lock on the recording path), NVTX ranges in CUDA builds, exported as Chrome
// trace events. Timestamps are CLOCK_MONOTONIC microseconds, the clock of Python's
// time.perf_counter_ns(), so events recorded by Python code merge on the same axis.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xrt {

struct TraceEvent {
  std::string name;
  std::string category;
  char phase = 'X';  // 'X' complete, 'i' instant
  double ts_us = 0;
  double dur_us = 0;
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  std::string args_json;  // "" or a JSON object
};

class Profiler {
 public:
  static Profiler& instance();
  static std::uint64_t now_ns();

  void enable() { enabled_.store(true, std::memory_order_relaxed); }
  void disable() { enabled_.store(false, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void clear();
  std::size_t capacity() const { return capacity_; }
  std::uint64_t dropped() const;  // events overwritten because the ring was full

  // begin pushes an NVTX range and returns the start time; end pops it and records.
  std::uint64_t begin_range(const std::string& name);
  void end_range(const std::string& name, const std::string& category, std::uint64_t start_ns,
                 const std::string& args_json = "");
  void instant(const std::string& name, const std::string& category,
               const std::string& args_json = "");
  std::vector<TraceEvent> events() const;  // oldest first

 private:
  explicit Profiler(std::size_t capacity);
  struct Slot;
  void record(TraceEvent event);
  std::size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<bool> enabled_{false};
};

// RAII range for C++ callers.
class ScopedRange {
 public:
  ScopedRange(std::string name, std::string category);
  ~ScopedRange();
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  std::string name_;
  std::string category_;
  std::uint64_t start_;
};

}  // namespace xrt
