// Tests of how the engine gives memory back: the memory limit and its retry
// path, OOM, release_available_cached_blocks under max_split_size, garbage
// collection, empty_cache, and cross-stream frees (record_stream). Expected
// numbers are worked out by hand from PyTorch 2.11's rules; addresses are
// offsets from the simulated device's base (first fit, 2 MiB aligned).
#include <gtest/gtest.h>

#include <string>

#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

TEST(MemoryLimit, RequestPastTheLimitFreesCachedSegmentsAndRetries) {
  Harness h;
  h.engine.set_memory_limit(80 * kMiB);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);  // 0..30
  h.engine.malloc(30 * kMiB, kStreamA);             // 30..60
  h.engine.free(a);
  // 60 + 40 > 80: a's cached segment goes back (after a full sync), then the
  // retry fits (30 + 40 <= 80). The 30 MiB hole at 0 is too small for it.
  Block* c = h.engine.malloc(40 * kMiB, kStreamA);
  EXPECT_EQ(c->address, kBase + 60 * kMiB);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  EXPECT_EQ(h.stats().num_sync_all_streams, 1);
  EXPECT_EQ(h.stats().num_device_alloc, 3);
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.stats().num_ooms, 0);
  EXPECT_EQ(h.now(h.stats().segment), 2);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(70 * kMiB));
  EXPECT_EQ(h.stats().reserved_bytes[kAllPools].peak, int64_t(70 * kMiB));
}

TEST(MemoryLimit, OutOfMemoryAfterAFailedRetryLeavesTheEngineUsable) {
  Harness h;
  h.engine.set_memory_limit(80 * kMiB);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);
  h.engine.malloc(30 * kMiB, kStreamA);
  try {
    h.engine.malloc(30 * kMiB, kStreamA);  // 90 > 80, nothing cached to free
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const OutOfMemoryError::Details& d = e.details();
    EXPECT_EQ(d.requested_bytes, 30 * kMiB);
    EXPECT_EQ(d.allocation_bytes, 30 * kMiB);
    EXPECT_TRUE(d.limit_set);
    EXPECT_EQ(d.allowed_bytes, 80 * kMiB);
    EXPECT_EQ(d.allocated_bytes, 60 * kMiB);
    EXPECT_EQ(d.reserved_bytes, 60 * kMiB);
    EXPECT_EQ(d.device_total, 8 * kGiB);
    EXPECT_EQ(d.device_free, 8 * kGiB - 60 * kMiB);
    EXPECT_NE(std::string(e.what()).find("Tried to allocate 30.00 MiB"), std::string::npos);
  }
  EXPECT_EQ(h.stats().num_ooms, 1);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  EXPECT_EQ(h.stats().num_sync_all_streams, 1);
  EXPECT_EQ(h.now(h.stats().allocation), 2);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(60 * kMiB));
  h.engine.check_invariants();

  // Exactly up to the limit still works, and so does reuse.
  EXPECT_EQ(h.engine.malloc(20 * kMiB, kStreamA)->address, kBase + 60 * kMiB);
  h.engine.free(a);
  EXPECT_EQ(h.engine.malloc(30 * kMiB, kStreamA)->address, kBase);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(80 * kMiB));
  EXPECT_EQ(h.stats().num_ooms, 1);
}

TEST(MemoryLimit, FullDeviceGivesOutOfMemoryWithTheDevicesFreeBytes) {
  Harness h("", 64 * kMiB);
  h.engine.malloc(40 * kMiB, kStreamA);
  try {
    h.engine.malloc(30 * kMiB, kStreamA);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_FALSE(e.details().limit_set);
    EXPECT_EQ(e.details().device_total, 64 * kMiB);
    EXPECT_EQ(e.details().device_free, 24 * kMiB);
  }
  EXPECT_EQ(h.stats().num_ooms, 1);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
}

TEST(MemoryLimit, FractionAllowsFloorOfFractionTimesCapacity) {
  Harness h;
  h.engine.set_memory_fraction(0.3);
  // 0.3 * 8 GiB = 2576980377.6 bytes.
  EXPECT_EQ(h.engine.memory_limit().allowed_bytes(), 2576980377u);
  EXPECT_THROW(h.engine.set_memory_fraction(1.5), ConfigError);
  EXPECT_EQ(h.engine.memory_limit().allowed_bytes(), 2576980377u);
}

TEST(MemoryLimit, FractionOneRemovesTheLimitAndZeroAllowsNothing) {
  // Native 2.11 (setMemoryFraction): only a fraction below 1.0 sets a limit.
  Harness h;
  h.engine.set_memory_fraction(0.3);
  h.engine.set_memory_fraction(1.0);
  EXPECT_FALSE(h.engine.memory_limit().is_set());
  h.engine.set_memory_fraction(0.0);
  EXPECT_TRUE(h.engine.memory_limit().is_set());
  EXPECT_EQ(h.engine.memory_limit().allowed_bytes(), 0u);
  EXPECT_THROW(h.engine.malloc(512, kStreamA), OutOfMemoryError);
}

TEST(ReleaseAvailableCachedBlocks, FreesLargestOversizeBlocksUntilTheRequestIsCovered) {
  Harness h("max_split_size_mb:64");
  h.engine.set_memory_limit(450 * kMiB);
  Block* a = h.engine.malloc(70 * kMiB, kStreamA);   // 0..70
  Block* b = h.engine.malloc(100 * kMiB, kStreamA);  // 70..170
  Block* c = h.engine.malloc(150 * kMiB, kStreamA);  // 170..320
  Block* d = h.engine.malloc(30 * kMiB, kStreamA);   // 320..350, not oversize
  for (Block* x : {a, b, c, d}) h.engine.free(x);
  // 350 + 200 > 450. Oversize blocks are freed largest first until 200 MiB
  // are released: 150, then 100. The 70 MiB oversize block and the 30 MiB
  // one stay; no full sync. The new segment fills the 250 MiB hole at 70.
  Block* e = h.engine.malloc(200 * kMiB, kStreamA);
  EXPECT_EQ(e->address, kBase + 70 * kMiB);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 70 * kMiB, kNotAlloc, kFree}},
                                        {{70 * kMiB, 200 * kMiB, kAlloc, kBusy}},
                                        {{320 * kMiB, 30 * kMiB, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.stats().num_device_free, 2);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
  EXPECT_EQ(h.stats().num_sync_all_streams, 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(300 * kMiB));
  EXPECT_EQ(h.stats().oversize_segments.current, 2);
  EXPECT_EQ(h.stats().oversize_segments.peak, 3);
}

TEST(ReleaseAvailableCachedBlocks, FreesTheSmallestSingleOversizeBlockThatCovers) {
  Harness h("max_split_size_mb:64");
  h.engine.set_memory_limit(450 * kMiB);
  Block* a = h.engine.malloc(100 * kMiB, kStreamA);  // 0..100
  Block* b = h.engine.malloc(300 * kMiB, kStreamA);  // 100..400
  h.engine.free(a);
  h.engine.free(b);
  // 300 >= 250 + 20 so the cache misses; 400 + 250 > 450. The 300 MiB block
  // alone covers 250: only it goes.
  Block* c = h.engine.malloc(250 * kMiB, kStreamA);
  EXPECT_EQ(c->address, kBase + 100 * kMiB);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 100 * kMiB, kNotAlloc, kFree}},
                                        {{100 * kMiB, 250 * kMiB, kAlloc, kBusy}}}));
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
}

// GC ages count best-fit searches of the large pool since a block was cached.
// With threshold 0.5 of 100 MiB, GC starts when reserved exceeds 50 MiB and
// frees unsplit blocks at least as old as the average age.
TEST(GarbageCollection, FreesOldUnsplitLargeBlocksBeforeReserving) {
  Harness h("garbage_collection_threshold:0.5");
  h.engine.set_memory_limit(100 * kMiB);
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);  // search 1, at 0
  Block* b = h.engine.malloc(14 * kMiB, kStreamA);  // search 2, at 12
  h.engine.free(a);                                 // a cached at 2
  h.engine.malloc(14 * kMiB, kStreamA);             // search 3, at 26
  h.engine.free(b);                                 // b cached at 3
  h.engine.malloc(16 * kMiB, kStreamA);             // search 4, at 40; reserved 56
  // Search 5 misses; 56 > 50: ages a = 3, b = 2, average 2.5: a goes (12
  // MiB >= the 6 MiB needed), b stays. 18 MiB does not fit a's hole.
  Block* e = h.engine.malloc(18 * kMiB, kStreamA);
  EXPECT_EQ(e->address, kBase + 56 * kMiB);
  EXPECT_EQ(Layout(h.engine), (Segments{{{12 * kMiB, 14 * kMiB, kNotAlloc, kFree}},
                                        {{26 * kMiB, 14 * kMiB, kAlloc, kBusy}},
                                        {{40 * kMiB, 16 * kMiB, kAlloc, kBusy}},
                                        {{56 * kMiB, 18 * kMiB, kAlloc, kBusy}}}));
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.stats().num_sync_all_streams, 0);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(62 * kMiB));
}

TEST(GarbageCollection, DoesNothingWithoutAMemoryLimit) {
  Harness h("garbage_collection_threshold:0.5");
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  Block* b = h.engine.malloc(14 * kMiB, kStreamA);
  h.engine.free(a);
  h.engine.malloc(14 * kMiB, kStreamA);
  h.engine.free(b);
  h.engine.malloc(16 * kMiB, kStreamA);
  h.engine.malloc(18 * kMiB, kStreamA);
  EXPECT_EQ(h.stats().num_device_free, 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(74 * kMiB));
}

TEST(EmptyCache, ReturnsOnlyUnsplitFreeSegments) {
  Harness h;
  Block* whole = h.engine.malloc(12 * kMiB, kStreamA);  // 0..12
  Block* head = h.engine.malloc(2 * kMiB, kStreamA);    // 12..32, split
  h.engine.malloc(2 * kMiB, kStreamA);
  h.engine.free(whole);
  h.engine.free(head);  // a free first piece does not make the segment whole
  Block* s1 = h.engine.malloc(kMiB, kStreamA);  // small segment 32..34
  Block* s2 = h.engine.malloc(kMiB, kStreamA);  // fills it
  h.engine.malloc(512, kStreamA);               // small segment 34..36, split
  h.engine.free(s1);
  h.engine.free(s2);
  h.engine.empty_cache();
  EXPECT_EQ(Layout(h.engine),
            (Segments{{{12 * kMiB, 2 * kMiB, kNotAlloc, kFree},
                       {14 * kMiB, 2 * kMiB, kAlloc, kBusy},
                       {16 * kMiB, 16 * kMiB, kNotAlloc, kFree}},
                      {{34 * kMiB, 512, kAlloc, kBusy},
                       {34 * kMiB + 512, 2 * kMiB - 512, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.stats().num_device_free, 2);
  EXPECT_EQ(h.stats().num_sync_all_streams, 1);
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kLargePool), int64_t(20 * kMiB));
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kSmallPool), int64_t(2 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split, kLargePool), 2);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes, kLargePool), int64_t(18 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split, kSmallPool), 1);
  EXPECT_EQ(h.device.live_segments(), 2u);
  EXPECT_EQ(h.device.used_bytes(), 22 * kMiB);
}

TEST(RecordStream, FreedBlockIsNotReusedUntilItsEventsComplete) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  h.engine.record_stream(a, kStreamB);
  h.engine.free(a);
  // Freed by the caller but still in use on B: active_pending_free.
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 12 * kMiB, kNotAlloc, kBusy}}}));
  EXPECT_EQ(h.now(h.stats().allocation), 0);
  EXPECT_EQ(h.now(h.stats().allocated_bytes), 0);
  EXPECT_EQ(h.now(h.stats().active), 1);
  EXPECT_EQ(h.now(h.stats().active_bytes), int64_t(12 * kMiB));
  EXPECT_EQ(h.now(h.stats().requested_bytes), int64_t(12 * kMiB));
  EXPECT_EQ(h.device.live_events(), 1u);

  Block* b = h.engine.malloc(12 * kMiB, kStreamA);  // event pending: new segment
  EXPECT_EQ(b->address, kBase + 12 * kMiB);
  h.engine.free(b);
  h.device.complete_events();
  // The next malloc collects a; lowest address wins between a and b.
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase);
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_EQ(h.now(h.stats().active), 1);
  EXPECT_EQ(h.now(h.stats().requested_bytes), int64_t(12 * kMiB));
  EXPECT_EQ(h.stats().num_device_alloc, 2);
}

TEST(RecordStream, CompletedEventsAreCollectedOnlyAtTheNextMalloc) {
  Harness h;  // events complete at once, but nobody has looked yet
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  h.engine.record_stream(a, kStreamB);
  h.engine.free(a);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 12 * kMiB, kNotAlloc, kBusy}}}));
  EXPECT_EQ(h.now(h.stats().active), 1);
  h.engine.malloc(512, kStreamA);
  EXPECT_EQ(Layout(h.engine)[0], (std::vector<BlockShape>{{0, 12 * kMiB, kNotAlloc, kFree}}));
  EXPECT_EQ(h.now(h.stats().active, kLargePool), 0);
}

TEST(RecordStream, UseOnTheAllocationStreamNeedsNoEvent) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  h.engine.record_stream(a, kStreamA);
  h.engine.free(a);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 12 * kMiB, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_EQ(h.now(h.stats().active), 0);
}

TEST(RecordStream, EmptyCacheWaitsForPendingFreesThenReleasesThem) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  h.engine.record_stream(a, kStreamB);
  h.engine.record_stream(a, kStreamB + 1);
  h.engine.free(a);
  EXPECT_EQ(h.device.live_events(), 2u);
  h.engine.empty_cache();
  EXPECT_TRUE(h.engine.segments().empty());
  EXPECT_EQ(h.stats().num_sync_all_streams, 1);
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.now(h.stats().active), 0);
  EXPECT_EQ(h.now(h.stats().requested_bytes), 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), 0);
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_EQ(h.device.live_segments(), 0u);
}

}  // namespace
}  // namespace cachealloc::testing
