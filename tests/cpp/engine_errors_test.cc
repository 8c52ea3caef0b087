// Tests of bad input through CachingAllocator, the front every caller uses:
// each error must be the documented type and leave the allocator exactly as
// it was (the stats' key_values() and the segment list compare equal).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/engine/blocks/size_policy.h"
#include "allocator/front/caching_allocator.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

class BadInput : public ::testing::Test {
 protected:
  BadInput() : device_(8 * kGiB), allocator_(AllocatorConfig(), {&device_}), collector_(-1) {
    allocator_.with_device(0, [&](DeviceCachingAllocator& e) { e.add_observer(&collector_); });
    // Some state worth disturbing: a cached segment on B at 0..12, a split
    // one on A at 12..32 (live_ and a free rest), a small one on B at 32..34.
    allocator_.deallocate(allocator_.allocate(12 * kMiB, 0, kStreamB));
    live_ = allocator_.allocate(2 * kMiB, 0, kStreamA);
    small_ = allocator_.allocate(1000, 0, kStreamB);
  }
  ~BadInput() override {
    allocator_.with_device(0, [&](DeviceCachingAllocator& e) { e.remove_observer(&collector_); });
  }

  using State = std::pair<std::vector<std::pair<std::string, int64_t>>,
                          Segments>;
  State state() {
    return allocator_.with_device(0, [&](DeviceCachingAllocator& e) {
      e.check_invariants();
      return State{collector_.stats().key_values(), Layout(e)};
    });
  }

  SimulatedDevice device_;
  CachingAllocator allocator_;
  StatsCollector collector_;
  uintptr_t live_ = 0;
  uintptr_t small_ = 0;
};

TEST_F(BadInput, FreeOfAnAddressNeverHandedOutThrowsAndChangesNothing) {
  const State before = state();
  EXPECT_EQ(live_, kBase + 12 * kMiB);
  EXPECT_THROW(allocator_.deallocate(live_ + 512), InvalidPointerError);  // inside a block
  EXPECT_THROW(allocator_.deallocate(kBase), InvalidPointerError);        // cached segment
  EXPECT_THROW(allocator_.deallocate(kBase + 14 * kMiB), InvalidPointerError);  // free rest
  EXPECT_THROW(allocator_.deallocate(0xdead0000, 0), InvalidPointerError);
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, DoubleFreeThrowsAndChangesNothing) {
  allocator_.deallocate(small_);
  const State before = state();
  EXPECT_THROW(allocator_.deallocate(small_), InvalidPointerError);
  EXPECT_THROW(allocator_.deallocate(small_, 0), InvalidPointerError);
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, RecordStreamOfAnUnknownAddressThrowsAndChangesNothing) {
  allocator_.deallocate(small_);
  const State before = state();
  EXPECT_THROW(allocator_.record_stream(small_, kStreamA), InvalidPointerError);
  EXPECT_THROW(allocator_.record_stream(0x1234, kStreamA), InvalidPointerError);
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, RequestAboveTheLargestSupportedSizeThrowsSizeOverflow) {
  const State before = state();
  EXPECT_THROW(allocator_.allocate(kMaxRequestSize + 1, 0, kStreamA), SizeOverflowError);
  EXPECT_THROW(allocator_.allocate(std::numeric_limits<size_t>::max(), 0, kStreamA),
               SizeOverflowError);
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, LargestSupportedSizeIsAnOrdinaryOutOfMemory) {
  // 2^60 bytes passes the size check and is refused by the device, after the
  // usual release-and-retry (which frees the cached 12 MiB segment).
  EXPECT_THROW(allocator_.allocate(kMaxRequestSize, 0, kStreamA), OutOfMemoryError);
  EXPECT_EQ(collector_.stats().num_ooms, 1);
  EXPECT_EQ(collector_.stats().num_alloc_retries, 1);
  EXPECT_EQ(collector_.stats().num_device_free, 1);
}

TEST_F(BadInput, ZeroBytesReturnsNullAndChangesNothing) {
  const State before = state();
  EXPECT_EQ(allocator_.allocate(0, 0, kStreamA), 0u);
  EXPECT_NO_THROW(allocator_.deallocate(0));
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, DeviceIndexOutOfRangeThrowsOutOfRange) {
  const State before = state();
  EXPECT_THROW(allocator_.allocate(512, 1, kStreamA), std::out_of_range);
  EXPECT_THROW(allocator_.allocate(512, -1, kStreamA), std::out_of_range);
  EXPECT_THROW(allocator_.allocate(0, 7, kStreamA), std::out_of_range);
  EXPECT_THROW(allocator_.empty_cache(1), std::out_of_range);
  EXPECT_THROW(allocator_.set_memory_fraction(0.5, 1), std::out_of_range);
  EXPECT_THROW(allocator_.deallocate(live_, 3), std::out_of_range);
  EXPECT_EQ(state(), before);
}

// Only -1 means "every device"; any other negative index is out of range, as
// it is for allocate() and set_memory_fraction().
TEST_F(BadInput, EmptyCacheOfANegativeDeviceOtherThanMinusOneIsOutOfRange) {
  const State before = state();
  EXPECT_THROW(allocator_.empty_cache(-2), std::out_of_range);
  EXPECT_EQ(state(), before);
}

TEST_F(BadInput, MemoryFractionOutsideZeroToOneIsAConfigError) {
  const State before = state();
  for (double bad : {1.5, -0.1, std::nan("")})
    EXPECT_THROW(allocator_.set_memory_fraction(bad, 0), ConfigError) << bad;
  EXPECT_FALSE(allocator_.with_device(
      0, [](DeviceCachingAllocator& e) { return e.memory_limit().is_set(); }));
  EXPECT_EQ(state(), before);
  allocator_.set_memory_fraction(0.5, 0);
  EXPECT_EQ(allocator_.with_device(
                0, [](DeviceCachingAllocator& e) { return e.memory_limit().allowed_bytes(); }),
            4 * kGiB);
}

// Retirement (the runtime's re-initialization): refused while any block is
// in use, leaving everything as it was; once retired, every allocation and
// pointer lookup is refused with AllocatorRetired (callers retry on the
// allocator that replaced it), while reads and empty_cache still work.
TEST_F(BadInput, RetireIsRefusedWhileABlockIsInUseAndChangesNothing) {
  const State before = state();
  EXPECT_FALSE(allocator_.retire_if_idle());
  EXPECT_EQ(state(), before);
  allocator_.deallocate(allocator_.allocate(4096, 0, kStreamA));  // still serves
  allocator_.deallocate(live_);
  EXPECT_FALSE(allocator_.retire_if_idle());  // small_ is still allocated
  // A block freed but waiting for another stream's event is still in use.
  device_.hold_events(true);
  allocator_.record_stream(small_, kStreamA);
  allocator_.deallocate(small_);
  EXPECT_FALSE(allocator_.retire_if_idle());
  // Its event done, it is released when the engine next processes events
  // (at the next malloc, as native).
  device_.complete_events();
  allocator_.deallocate(allocator_.allocate(512, 0, kStreamA));
  EXPECT_TRUE(allocator_.retire_if_idle());
}

TEST_F(BadInput, RetiredAllocatorRefusesEveryCallThatWouldChangeOrFindABlock) {
  allocator_.deallocate(live_);
  allocator_.deallocate(small_);
  ASSERT_TRUE(allocator_.retire_if_idle());
  const State before = state();
  EXPECT_THROW(allocator_.allocate(4096, 0, kStreamA), AllocatorRetired);
  EXPECT_THROW(allocator_.allocate(1000, 0, kStreamB), AllocatorRetired);  // a cached fit
  EXPECT_THROW(allocator_.deallocate(live_, 0), AllocatorRetired);
  EXPECT_THROW(allocator_.deallocate(0xdead0000, -1), AllocatorRetired);
  EXPECT_THROW(allocator_.record_stream(live_, kStreamB), AllocatorRetired);
  EXPECT_THROW(allocator_.block_info(small_), AllocatorRetired);
  EXPECT_EQ(state(), before);
  EXPECT_EQ(allocator_.allocate(0, 0, kStreamA), 0u);  // size 0 makes no block, as before
  // Its cache can still go back to the device.
  allocator_.empty_cache();
  EXPECT_TRUE(allocator_.with_device(0, [](DeviceCachingAllocator& e) { return e.segments().empty(); }));
}

}  // namespace
}  // namespace cachealloc::testing
