// Tests of run-time settings (torch.cuda.memory._set_allocator_settings):
// AllocatorConfig::with_settings follows native 2.11's rule for keys a call
// does not name (c10/core/AllocatorConfig.cpp parseArgs resets
// max_split_size_mb, roundup_power2_divisions and
// garbage_collection_threshold on every call; c10/cuda/CUDAAllocatorConfig
// keys persist), and CachingAllocator::apply_settings puts the result in
// force for later requests on every device, or changes nothing.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/config/config.h"
#include "allocator/base/errors.h"
#include "allocator/sim/simulated_device.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr StreamId kStream = 0x100;

TEST(WithSettings, ResetsSplitRoundupAndGcUnlessNamed) {
  const AllocatorConfig start = AllocatorConfig::parse(
      "max_split_size_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.6,"
      "max_non_split_rounding_mb:40,release_lock_on_cudamalloc:True");
  const AllocatorConfig next = start.with_settings("pinned_num_register_threads:8");
  EXPECT_EQ(next.max_split_size, AllocatorConfig::kUnlimitedSplit);
  EXPECT_EQ(next.roundup_power2_divisions, AllocatorConfig{}.roundup_power2_divisions);
  EXPECT_EQ(next.garbage_collection_threshold, 0.0);
  // max_non_split_rounding_mb returns to the large segment size (20 MiB);
  // the CUDA keys persist.
  EXPECT_EQ(next.max_non_split_rounding_size, 20 * kMiB);
  EXPECT_TRUE(next.release_lock_on_cudamalloc);
  EXPECT_EQ(next.pinned_num_register_threads, 8u);
  EXPECT_EQ(next.source, "pinned_num_register_threads:8");
}

TEST(WithSettings, NamedKeysTakeTheirNewValues) {
  const AllocatorConfig next =
      AllocatorConfig{}.with_settings("roundup_power2_divisions:4,max_split_size_mb:40");
  EXPECT_EQ(next.divisions_for(84 * kMiB), 4u);
  EXPECT_EQ(next.max_split_size, 40 * kMiB);
}

TEST(WithSettings, BadTextIsRefusedWithNativesWordingForAnUnknownKey) {
  const AllocatorConfig start = AllocatorConfig::parse("max_split_size_mb:64");
  try {
    (void)start.with_settings("bogus_key:1");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "Unrecognized key 'bogus_key' in Accelerator allocator config."),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)start.with_settings("roundup_power2_divisions:3"), ConfigError);
  EXPECT_THROW((void)start.with_settings("max_split_size_mb:10"), ConfigError);
}

TEST(WithSettings, BackendCannotChangeAtRunTime) {
  const AllocatorConfig native;
  EXPECT_EQ(native.with_settings("backend:native").backend, BackendKind::kNative);
  EXPECT_THROW((void)native.with_settings("backend:cudaMallocAsync"), ConfigError);
}

TEST(WithSettings, PerProcessMemoryFractionIsRecorded) {
  EXPECT_EQ(AllocatorConfig{}.with_settings("per_process_memory_fraction:0.5")
                .per_process_memory_fraction,
            0.5);
}

class ApplySettings : public ::testing::Test {
 protected:
  ApplySettings()
      : device0_(8 * kGiB),
        device1_(8 * kGiB, uintptr_t{1} << 44),
        allocator_(AllocatorConfig::parse("garbage_collection_threshold:0.5"),
                   {&device0_, &device1_}) {}
  SimulatedDevice device0_;
  SimulatedDevice device1_;
  CachingAllocator allocator_;
};

TEST_F(ApplySettings, LaterRequestsAreRoundedByTheNewDivisionsOnEveryDevice) {
  // 84 MiB + 1: plain rounding keeps it (512-byte steps); 4 divisions of the
  // 64..128 MiB interval round it up to 96 MiB (the example).
  const size_t request = 84 * kMiB + 1;
  const uintptr_t before = allocator_.allocate(request, 0, kStream);
  EXPECT_EQ(allocator_.block_size(before), 84 * kMiB + 512);
  allocator_.apply_settings("roundup_power2_divisions:4");
  for (int d : {0, 1}) {
    const uintptr_t after = allocator_.allocate(request, d, kStream);
    EXPECT_EQ(allocator_.block_size(after), 96 * kMiB) << "device " << d;
    allocator_.deallocate(after, d);
  }
  allocator_.deallocate(before, 0);
  EXPECT_EQ(allocator_.config().source, "roundup_power2_divisions:4");
  // garbage_collection_threshold was not named: back to off.
  EXPECT_EQ(allocator_.config().garbage_collection_threshold, 0.0);
}

TEST_F(ApplySettings, RefusedTextChangesNothing) {
  allocator_.apply_settings("roundup_power2_divisions:4");
  EXPECT_THROW(allocator_.apply_settings("roundup_power2_divisions:8,bogus_key:1"), ConfigError);
  EXPECT_EQ(allocator_.config().source, "roundup_power2_divisions:4");
  const uintptr_t p = allocator_.allocate(84 * kMiB + 1, 0, kStream);
  EXPECT_EQ(allocator_.block_size(p), 96 * kMiB);  // 4 divisions, not 8
  allocator_.deallocate(p, 0);
}

TEST_F(ApplySettings, MemoryFractionKeyDoesNotActAtRunTime) {
  // Native applies per_process_memory_fraction when a device's allocator is
  // built; a later call records it only.
  allocator_.apply_settings("per_process_memory_fraction:0.25");
  allocator_.with_device(0, [](DeviceCachingAllocator& e) {
    EXPECT_FALSE(e.memory_limit().is_set());
  });
  const uintptr_t p = allocator_.allocate(4 * kGiB, 0, kStream);  // above 0.25 of 8 GiB
  allocator_.deallocate(p, 0);
}

}  // namespace
}  // namespace cachealloc
