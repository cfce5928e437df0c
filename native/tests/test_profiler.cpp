#include <thread>

#include "check.h"
#include "xpuruntime/profiler.h"

using namespace xrt;

XRT_TEST(ranges_record_only_when_enabled) {
  Profiler& p = Profiler::instance();
  p.clear();
  p.disable();
  { ScopedRange r("off", "test"); }
  CHECK(p.events().empty());
  p.enable();
  { ScopedRange r("on", "test"); }
  p.instant("mark", "test", "{\"k\":1}");
  const auto events = p.events();
  CHECK(events.size() == 2);
  CHECK(events[0].name == "on" && events[0].phase == 'X' && events[0].dur_us >= 0);
  CHECK(events[1].phase == 'i' && events[1].args_json == "{\"k\":1}");
}

XRT_TEST(concurrent_writers_lose_nothing_below_capacity) {
  Profiler& p = Profiler::instance();
  p.clear();
  p.enable();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p] {
      for (int i = 0; i < 1000; ++i) p.instant("e", "test");
    });
  }
  for (auto& t : threads) t.join();
  CHECK(p.events().size() == 4000);
  CHECK(p.dropped() == 0);
}

XRT_TEST(ring_keeps_the_newest_events_when_full) {
  Profiler& p = Profiler::instance();
  p.clear();
  p.enable();
  const std::size_t n = p.capacity() + 10;
  for (std::size_t i = 0; i < n; ++i) p.instant(std::to_string(i), "test");
  const auto events = p.events();
  CHECK(events.size() == p.capacity());
  CHECK(events.back().name == std::to_string(n - 1));
  CHECK(p.dropped() == 10);
  p.clear();
}

XRT_TEST_MAIN()
