#include "check.h"
#include "xpuruntime/device.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/memory.h"

using namespace xrt;

XRT_TEST(size_classes_round_up_by_at_most_a_quarter) {
  CHECK(size_class_bytes(1) == 512);
  CHECK(size_class_bytes(512) == 512);
  CHECK(size_class_bytes(513) == 640);
  CHECK(size_class_bytes(1 << 20) == (1 << 20));
  for (std::size_t n : {1000u, 4097u, 123457u, 10000001u}) {
    const std::size_t c = size_class_bytes(n);
    CHECK(c >= n && c <= n + n / 4 + 512);
  }
}

XRT_TEST(pool_reuses_blocks_without_new_driver_allocations) {
  if (DeviceManager::instance().cuda_device_count() == 0) {
    std::printf("  skipped: %s\n", DeviceManager::instance().cuda_unavailable_reason().c_str());
    CHECK_THROWS(Error, CachingAllocator::instance().allocate(1024, 0, nullptr), "");
    return;
  }
  auto& pool = CachingAllocator::instance();
  void* p = pool.allocate(1 << 20, 0, nullptr);
  pool.free(p);
  const auto before = pool.stats().driver_allocations;
  for (int i = 0; i < 100; ++i) pool.free(pool.allocate(1 << 20, 0, nullptr));
  CHECK(pool.stats().driver_allocations == before);
  CHECK(pool.stats().cache_hits >= 100);
  pool.empty_cache();
  CHECK(pool.stats().reserved == 0);
}

XRT_TEST(device_index_out_of_range_says_how_many_exist) {
  const int n = DeviceManager::instance().cuda_device_count();
  CHECK_THROWS(InvalidArgumentError, DeviceManager::instance().check_device({DeviceKind::CUDA, n}),
               "out of range");
  CHECK(DeviceManager::instance().all_devices().back().kind == DeviceKind::CPU);
}

XRT_TEST_MAIN()
