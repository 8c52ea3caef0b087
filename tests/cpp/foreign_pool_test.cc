// Private pools whose segments come from another allocator (PyTorch's
// MemPool(allocator=...)): segments are taken from and given back to the
// pool's own SegmentSource, never the device's; everything else behaves as
// for any pool; a source that refuses or fails part way is an OOM (or its
// error) in that pool with nothing leaked. The foreign allocator here is a
// second simulated device at another base address.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr PoolId kPool{0, 1};
const PoolFilter kEveryStream = [](StreamId) { return true; };
constexpr uintptr_t kForeignBase = uintptr_t{0x7e0000000000};

// A foreign allocator: a simulated device of its own that can also be told
// to fail with an error (an allocator whose alloc function raises).
class ForeignAllocator : public SimulatedDevice {
 public:
  explicit ForeignAllocator(size_t capacity = 8 * kGiB) : SimulatedDevice(capacity, kForeignBase) {}
  uintptr_t allocate(int device, size_t bytes, StreamId stream) override {
    ++allocate_calls;
    if (fail_next) {
      fail_next = false;
      throw BackendError("foreign allocator failed");
    }
    return SimulatedDevice::allocate(device, bytes, stream);
  }
  void release(int device, uintptr_t address, size_t bytes) override {
    if (fail_release) throw BackendError("foreign allocator failed to free");
    SimulatedDevice::release(device, address, bytes);
  }
  bool fail_next = false;
  bool fail_release = false;
  int allocate_calls = 0;
};

// The pool routed to for every stream, made with `source`.
void route_to_foreign_pool(Harness& h, std::shared_ptr<ForeignAllocator> source) {
  h.engine.create_or_incref_pool(kPool, std::move(source));
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
}

void end_route_and_release(Harness& h) {
  h.engine.end_allocate_to_pool(kPool);
  h.engine.release_pool(kPool);  // use_mem_pool's exit
  h.engine.release_pool(kPool);  // the MemPool object's
}

TEST(ForeignPool, SegmentsComeFromThePoolsAllocatorAndGoBackToIt) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>();
  Block* outside = h.engine.malloc(512, kStreamA);  // device segment at kBase
  route_to_foreign_pool(h, foreign);
  Block* small = h.engine.malloc(512, kStreamA);
  Block* large = h.engine.malloc(3 * kMiB, kStreamA);
  // Native's segment sizes, handed to the foreign allocator: 2 MiB, 20 MiB.
  EXPECT_EQ(small->address, kForeignBase);
  EXPECT_EQ(large->address, kForeignBase + 2 * kMiB);
  EXPECT_EQ(foreign->used_bytes(), 22 * kMiB);
  EXPECT_EQ(h.device.used_bytes(), 2 * kMiB);  // the default segment only
  // Statistics count them as any segment (native does the same).
  EXPECT_EQ(h.now(h.stats().segment), 3);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(24 * kMiB));
  EXPECT_EQ(h.stats().num_device_alloc, 3);
  // Freed blocks are cached in the pool and reused there, not returned.
  h.engine.free(small);
  Block* again = h.engine.malloc(1024, kStreamA);
  EXPECT_EQ(again->address, kForeignBase);
  EXPECT_EQ(foreign->live_segments(), 2u);
  h.engine.free(again);
  h.engine.free(large);
  end_route_and_release(h);
  h.engine.check_invariants();
  // Freeable: empty_cache gives both segments back to the foreign allocator.
  h.engine.empty_cache();
  EXPECT_EQ(foreign->live_segments(), 0u);
  EXPECT_EQ(foreign->used_bytes(), 0u);
  EXPECT_FALSE(h.engine.has_pool(kPool));
  EXPECT_EQ(h.device.live_segments(), 1u);
  EXPECT_EQ(h.stats().num_device_free, 2);
  h.engine.free(outside);
  h.engine.check_invariants();
}

TEST(ForeignPool, TheErasedPoolLetsGoOfItsAllocator) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>();
  route_to_foreign_pool(h, foreign);
  EXPECT_EQ(foreign.use_count(), 2);  // the test's and the pool's
  h.engine.free(h.engine.malloc(512, kStreamA));
  end_route_and_release(h);
  EXPECT_EQ(foreign.use_count(), 2);  // freeable, still holding a segment
  h.engine.empty_cache();
  EXPECT_EQ(foreign.use_count(), 1);
}

TEST(ForeignPool, NoSplitAndEmptyCacheOfThePoolBehaveAsForAnyPool) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>();
  route_to_foreign_pool(h, foreign);
  h.engine.set_no_split(kPool);
  Block* a = h.engine.malloc(3 * kMiB, kStreamA);
  EXPECT_EQ(a->size, 20 * kMiB);  // handed out whole
  h.engine.free(a);
  end_route_and_release(h);
  h.engine.empty_cache({}, kPool);  // ~MemPool's emptyCache(id)
  EXPECT_EQ(foreign->live_segments(), 0u);
  h.engine.check_invariants();
}

TEST(ForeignPool, ARefusalOfThePoolsAllocatorIsAnOomInThatPoolWithNothingLeaked) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>(24 * kMiB);
  route_to_foreign_pool(h, foreign);
  Block* first = h.engine.malloc(3 * kMiB, kStreamA);   // 20 MiB segment
  Block* second = h.engine.malloc(512, kStreamA);       // 2 MiB small segment
  h.engine.free(second);                                // cached in the pool
  const auto before = h.stats();
  // 18 MiB: more than the cached 17 MiB remainder, and more than the
  // foreign allocator has left (2 MiB) while the device has gigabytes free.
  EXPECT_THROW(h.engine.malloc(18 * kMiB, kStreamA), OutOfMemoryError);
  const auto after = h.stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  // Only the pool's release steps ran: a route is open, so the default
  // pools were not emptied; nothing was reserved from the device.
  EXPECT_EQ(h.device.live_segments(), 0u);
  EXPECT_EQ(foreign->live_segments(), 2u);
  EXPECT_EQ(h.now(after.segment), 2);
  EXPECT_EQ(h.now(after.allocation), 1);
  h.engine.check_invariants();
  // Part way through a run of requests: the next ones still work.
  Block* small = h.engine.malloc(512, kStreamA);  // the cached small block
  EXPECT_EQ(small->address, kForeignBase + 20 * kMiB);
  h.engine.free(small);
  h.engine.free(first);
  end_route_and_release(h);
  h.engine.empty_cache();
  EXPECT_EQ(foreign->live_segments(), 0u);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), 0);
}

TEST(ForeignPool, AnErrorOfThePoolsAllocatorPropagatesWithNothingLeaked) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>();
  route_to_foreign_pool(h, foreign);
  Block* a = h.engine.malloc(512, kStreamA);
  foreign->fail_next = true;
  EXPECT_THROW(h.engine.malloc(3 * kMiB, kStreamA), BackendError);
  EXPECT_EQ(foreign->allocate_calls, 2);  // no retry after an error
  EXPECT_EQ(foreign->live_segments(), 1u);
  EXPECT_EQ(h.now(h.stats().segment), 1);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(2 * kMiB));
  h.engine.check_invariants();
  Block* b = h.engine.malloc(3 * kMiB, kStreamA);  // the allocator works again
  EXPECT_EQ(b->address, kForeignBase + 2 * kMiB);
  h.engine.free(a);
  h.engine.free(b);
  end_route_and_release(h);
  h.engine.empty_cache();
  EXPECT_EQ(foreign->live_segments(), 0u);
  h.engine.check_invariants();
}

TEST(ForeignPool, AFailedFreeOfThePoolsAllocatorLeavesTheSegmentCached) {
  Harness h;
  auto foreign = std::make_shared<ForeignAllocator>();
  route_to_foreign_pool(h, foreign);
  h.engine.free(h.engine.malloc(512, kStreamA));
  end_route_and_release(h);
  foreign->fail_release = true;
  EXPECT_THROW(h.engine.empty_cache(), BackendError);
  EXPECT_TRUE(h.engine.has_pool(kPool));
  EXPECT_EQ(h.now(h.stats().segment), 1);
  EXPECT_EQ(h.stats().num_device_free, 0);
  h.engine.check_invariants();
  foreign->fail_release = false;
  h.engine.empty_cache();
  EXPECT_FALSE(h.engine.has_pool(kPool));
  EXPECT_EQ(foreign->live_segments(), 0u);
  EXPECT_EQ(h.now(h.stats().segment), 0);
}

TEST(ForeignPool, UseOnOomServesADefaultRequestFromTheForeignPoolsCache) {
  Harness h("", 4 * kMiB);  // the device cannot hold a 20 MiB segment
  auto foreign = std::make_shared<ForeignAllocator>();
  route_to_foreign_pool(h, foreign);
  h.engine.set_use_on_oom(kPool, true);
  h.engine.free(h.engine.malloc(3 * kMiB, kStreamA));  // 20 MiB cached, foreign
  h.engine.end_allocate_to_pool(kPool);
  h.engine.release_pool(kPool);  // use_mem_pool's exit; the MemPool holds it
  Block* b = h.engine.malloc(8 * kMiB, kStreamA);  // default request; device refuses
  EXPECT_EQ(b->address, kForeignBase);
  EXPECT_EQ(foreign->live_segments(), 1u);
  h.engine.free(b);  // back into the foreign pool
  h.engine.set_use_on_oom(kPool, false);
  h.engine.release_pool(kPool);
  h.engine.empty_cache();
  EXPECT_EQ(foreign->live_segments(), 0u);
  h.engine.check_invariants();
}

TEST(ForeignPool, AnAllocatorCanOnlyBeGivenWhenThePoolIsMade) {
  Harness h;
  h.engine.create_or_incref_pool(kPool);
  EXPECT_THROW(h.engine.create_or_incref_pool(kPool, std::make_shared<ForeignAllocator>()),
               std::invalid_argument);
  EXPECT_EQ(h.engine.pool_use_count(kPool), 1);  // unchanged
}

}  // namespace
}  // namespace cachealloc::testing
