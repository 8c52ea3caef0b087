// Device-less frees (PyTorch's tensor deleter gives no device): the device
// directory's hints, and the front freeing through it on any device, with
// stale hints falling back to the search.
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/front/device_directory.h"
#include "allocator/base/errors.h"
#include "allocator/sim/simulated_device.h"
#include "gtest/gtest.h"

namespace cachealloc {
namespace {

constexpr uintptr_t kTiB = uintptr_t{1} << 40;
constexpr uintptr_t kMiB = uintptr_t{1} << 20;

TEST(DeviceDirectory, KnowsNothingUntilTaught) {
  DeviceDirectory d;
  EXPECT_EQ(d.lookup(SimulatedDevice::kDefaultBase), -1);
}

TEST(DeviceDirectory, AnswersForTheWholeGranuleOfALearnedAddress) {
  DeviceDirectory d;
  const uintptr_t granule = SimulatedDevice::kDefaultBase + 3 * kTiB;
  d.learn(granule + 512, 3);
  EXPECT_EQ(d.lookup(granule), 3);
  EXPECT_EQ(d.lookup(granule + 2 * kMiB - 512), 3);
  EXPECT_EQ(d.lookup(granule + 2 * kMiB), -1);  // the next granule
}

TEST(DeviceDirectory, ALaterLessonReplacesAnEarlierOne) {
  DeviceDirectory d;
  d.learn(SimulatedDevice::kDefaultBase, 0);
  d.learn(SimulatedDevice::kDefaultBase, 5);
  EXPECT_EQ(d.lookup(SimulatedDevice::kDefaultBase), 5);
}

TEST(DeviceDirectory, DevicesItCannotNameAreNotLearned) {
  DeviceDirectory d;
  d.learn(SimulatedDevice::kDefaultBase, DeviceDirectory::kMaxDevices);
  d.learn(SimulatedDevice::kDefaultBase, -1);
  EXPECT_EQ(d.lookup(SimulatedDevice::kDefaultBase), -1);
  d.learn(SimulatedDevice::kDefaultBase, DeviceDirectory::kMaxDevices - 1);
  EXPECT_EQ(d.lookup(SimulatedDevice::kDefaultBase), DeviceDirectory::kMaxDevices - 1);
}

// Four simulated devices; `apart`: their address ranges a TiB apart (as the
// runtime lays them out), else all on one base (addresses reused across
// devices, which is how a stale hint arises after a segment is released).
struct Devices {
  explicit Devices(bool apart) {
    for (uintptr_t i = 0; i < 4; ++i) {
      owned.push_back(std::make_unique<SimulatedDevice>(
          size_t{1} << 30, SimulatedDevice::kDefaultBase + (apart ? i * kTiB : 0)));
      backends.push_back(owned.back().get());
    }
  }
  std::vector<std::unique_ptr<SimulatedDevice>> owned;
  std::vector<DeviceBackend*> backends;
};

size_t allocated_on(CachingAllocator& a, int device) {
  return a.with_device(device, [](DeviceCachingAllocator& e) { return e.allocated_bytes(); });
}

TEST(DevicelessFree, FreesOnEveryDeviceAndRefusesASecondFree) {
  Devices devices(true);
  CachingAllocator a(AllocatorConfig{}, devices.backends);
  for (int round = 0; round < 2; ++round) {  // the second round uses the hints
    for (int d = 0; d < 4; ++d) {
      const uintptr_t p = a.allocate(4096, d, 0);
      EXPECT_GT(allocated_on(a, d), 0u);
      a.deallocate(p);
      EXPECT_EQ(allocated_on(a, d), 0u);
      EXPECT_THROW(a.deallocate(p), InvalidPointerError);
    }
  }
}

TEST(DevicelessFree, AStaleHintFallsBackToTheSearch) {
  Devices devices(false);  // device 0's and device 2's first segments share addresses
  CachingAllocator a(AllocatorConfig{}, devices.backends);
  const uintptr_t on0 = a.allocate(4096, 0, 0);
  a.deallocate(on0);  // teaches: this granule is device 0's
  a.empty_cache(0);   // device 0 gives the segment back
  const uintptr_t on2 = a.allocate(4096, 2, 0);
  ASSERT_EQ(on2, on0);  // same address, now device 2's
  a.deallocate(on2);    // the hint (device 0) misses; the search finds device 2
  EXPECT_EQ(allocated_on(a, 2), 0u);
  EXPECT_THROW(a.deallocate(on2), InvalidPointerError);
}

TEST(DevicelessFree, ThreadsFreeingOnDifferentDevicesKeepEveryCountExact) {
  Devices devices(true);
  CachingAllocator a(AllocatorConfig{}, devices.backends);
  std::vector<std::thread> threads;
  for (int d = 0; d < 4; ++d)
    threads.emplace_back([&a, d] {
      std::vector<uintptr_t> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(a.allocate(512 * static_cast<size_t>(1 + i % 64), d, 0));
        if (i % 3 == 2) {
          for (uintptr_t p : held) a.deallocate(p);  // device-less
          held.clear();
        }
      }
      for (uintptr_t p : held) a.deallocate(p);
    });
  for (auto& t : threads) t.join();
  for (int d = 0; d < 4; ++d) EXPECT_EQ(allocated_on(a, d), 0u);
}

}  // namespace
}  // namespace cachealloc
