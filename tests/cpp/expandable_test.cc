// Expandable segments (expandable_segments:True) on the simulated device:
// growth by mapping pages where native maps them, unmapping on empty_cache
// and the retry path, switching the setting at run time, the observers, and
// faults during a growth. Expected numbers are worked out by hand from
// PyTorch 2.11's rules: 20 MiB pages in the large pool, 2 MiB in the small;
// offsets are from the segment's base (its reservation).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "stats/history.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr const char* kExpandable = "expandable_segments:True";

// The base of the engine's only (or first) expandable segment.
uintptr_t segment_base(const DeviceCachingAllocator& e) {
  return e.expandable_segment_list().at(0)->base();
}

// Every mapped range's blocks as (offset from base, bytes, allocated, free).
Segments RangeLayout(const DeviceCachingAllocator& e, uintptr_t base) {
  Segments out;
  for (const SegmentView& s : e.segments()) {
    EXPECT_TRUE(s.is_expandable);
    std::vector<BlockShape> blocks;
    for (const Block* b : s.blocks)
      blocks.emplace_back(b->address - base, b->size, b->allocated, b->is_free());
    out.push_back(std::move(blocks));
  }
  return out;
}

TEST(ExpandableSegments, GrowthMapsWholePagesAndSplitsAnyRemainder) {
  Harness h(kExpandable);
  // 30 MiB maps two 20 MiB pages; the 10 MiB left is cut off (>= 512 B).
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);
  const uintptr_t base = segment_base(h.engine);
  EXPECT_EQ(a->address, base);
  // 25 MiB: the free 10 MiB at the end grows by one page into 30 MiB.
  Block* b = h.engine.malloc(25 * kMiB, kStreamA);
  EXPECT_EQ(b->address, base + 30 * kMiB);
  EXPECT_EQ(RangeLayout(h.engine, base),
            (Segments{{{0, 30 * kMiB, kAlloc, kBusy},
                       {30 * kMiB, 25 * kMiB, kAlloc, kBusy},
                       {55 * kMiB, 5 * kMiB, kNotAlloc, kFree}}}));
  const DeviceStats s = h.stats();
  EXPECT_EQ(h.now(s.reserved_bytes), int64_t(60 * kMiB));
  EXPECT_EQ(s.num_device_alloc, 2);
  // Native counts no segments and no inactive split for expandable memory.
  EXPECT_EQ(s.segment[kAllPools].allocated, 0);
  EXPECT_EQ(s.inactive_split[kAllPools].allocated, 0);
  EXPECT_EQ(s.inactive_split_bytes[kAllPools].allocated, 0);
  // The segment reserves 1 1/8 of the device in whole pages, no memory.
  EXPECT_EQ(h.engine.expandable_segment_list().at(0)->bytes(), 461 * 20 * kMiB);
  EXPECT_EQ(h.device.used_bytes(), 60 * kMiB);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, EmptyCacheUnmapsTheWholeFreePagesAndSplitsTheRange) {
  Harness h(kExpandable);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);
  Block* b = h.engine.malloc(25 * kMiB, kStreamA);
  const uintptr_t base = segment_base(h.engine);
  h.engine.free(a);
  h.engine.empty_cache();
  // [0, 30) was free: its whole page [0, 20) goes, [20, 30) stays mapped.
  EXPECT_EQ(RangeLayout(h.engine, base),
            (Segments{{{20 * kMiB, 10 * kMiB, kNotAlloc, kFree},
                       {30 * kMiB, 25 * kMiB, kAlloc, kBusy},
                       {55 * kMiB, 5 * kMiB, kNotAlloc, kFree}}}));
  DeviceStats s = h.stats();
  EXPECT_EQ(h.now(s.reserved_bytes), int64_t(40 * kMiB));
  EXPECT_EQ(s.num_device_free, 1);
  h.engine.check_invariants();
  // Freeing the rest and emptying the cache returns the reservation too.
  h.engine.free(b);
  h.engine.empty_cache();
  EXPECT_TRUE(h.engine.segments().empty());
  EXPECT_TRUE(h.engine.expandable_segment_list().empty());
  EXPECT_EQ(h.device.live_reservations(), 0u);
  EXPECT_EQ(h.device.mapped_pages(), 0u);
  s = h.stats();
  EXPECT_EQ(h.now(s.reserved_bytes), 0);
  EXPECT_EQ(s.num_device_free, 2);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, AHoleIsFilledAgainAtTheLowestAddress) {
  Harness h(kExpandable);
  Block* a = h.engine.malloc(40 * kMiB, kStreamA);
  Block* b = h.engine.malloc(20 * kMiB, kStreamA);
  const uintptr_t base = segment_base(h.engine);
  h.engine.free(a);
  h.engine.empty_cache();  // [0, 40) unmapped: two ranges' worth of hole
  ASSERT_EQ(h.engine.segments().size(), 1u);
  // 20 MiB fits the hole: mapped at the segment's start, a range of its own.
  Block* c = h.engine.malloc(20 * kMiB, kStreamA);
  EXPECT_EQ(c->address, base);
  EXPECT_EQ(h.engine.segments().size(), 2u);
  // 20 more close the hole: the two ranges join into one.
  Block* d = h.engine.malloc(20 * kMiB, kStreamA);
  EXPECT_EQ(d->address, base + 20 * kMiB);
  EXPECT_EQ(RangeLayout(h.engine, base),
            (Segments{{{0, 20 * kMiB, kAlloc, kBusy},
                       {20 * kMiB, 20 * kMiB, kAlloc, kBusy},
                       {40 * kMiB, 20 * kMiB, kAlloc, kBusy}}}));
  h.engine.free(b);
  h.engine.free(c);
  h.engine.free(d);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, EachStreamAndPoolGetsItsOwnSegment) {
  Harness h(kExpandable);
  h.engine.malloc(4 * kMiB, kStreamA);
  h.engine.malloc(4 * kMiB, kStreamB);
  h.engine.malloc(4 * kKiB, kStreamA);
  const auto& segs = h.engine.expandable_segment_list();
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kLargePool), int64_t(40 * kMiB));
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kSmallPool), int64_t(2 * kMiB));
  h.engine.check_invariants();
}

TEST(ExpandableSegments, TurningItOffStopsReuseOfExpandableBlocks) {
  Harness h(kExpandable);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);  // 10 MiB left free, expandable
  h.engine.set_expandable_segments(false);
  // The free 10 MiB would fit; off, it is skipped and a whole segment comes.
  Block* b = h.engine.malloc(5 * kMiB, kStreamA);
  EXPECT_FALSE(b->expandable);
  EXPECT_EQ(h.stats().segment[kAllPools].current, 1);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(60 * kMiB));
  // On again: best fit by the size a block can grow to. The expandable
  // 10 MiB can grow to the end of its reservation; the classic 15 MiB left
  // of b's segment cannot, so it ranks lower and is taken (native's walk).
  h.engine.set_expandable_segments(true);
  Block* c = h.engine.malloc(5 * kMiB, kStreamA);
  EXPECT_FALSE(c->expandable);
  EXPECT_EQ(c->address, b->address + 5 * kMiB);
  h.engine.free(a);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, TurningItOnChangesOnlyWhereNewMemoryGoes) {
  Harness h;
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);  // a whole 30 MiB segment
  h.engine.free(a);
  h.engine.set_expandable_segments(true);
  // The cached classic segment still serves; the large pool now splits off
  // any remainder of 512 B or more (native's should_split with expandable
  // on; off, 512 KiB would stay with the block).
  Block* b = h.engine.malloc(29 * kMiB + 512 * kKiB, kStreamA);
  EXPECT_FALSE(b->expandable);
  EXPECT_EQ(b->size, 29 * kMiB + 512 * kKiB);
  EXPECT_TRUE(h.engine.expandable_segment_list().empty());
  Block* c = h.engine.malloc(40 * kMiB, kStreamA);
  EXPECT_TRUE(c->expandable);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, GarbageCollectionLeavesExpandableBlocksAlone) {
  Harness h("expandable_segments:True,garbage_collection_threshold:0.25");
  h.engine.set_memory_limit(200 * kMiB);
  Block* a = h.engine.malloc(60 * kMiB, kStreamA);
  h.engine.free(a);
  // Past the threshold (60 > 50): the collector finds no unsplit block, and
  // the free 60 MiB grows by one page instead.
  Block* b = h.engine.malloc(70 * kMiB, kStreamA);
  EXPECT_EQ(b->address, segment_base(h.engine));
  EXPECT_EQ(h.stats().num_device_free, 0);
  h.engine.check_invariants();
}

TEST(ExpandableSegments, TheLimitCountsMappedBytesWithTheSegmentSizeOfTheRequest) {
  Harness h(kExpandable);
  h.engine.set_memory_limit(50 * kMiB);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);  // maps 40 MiB
  // 40 + 12 (the request's segment size) > 50: refused before mapping,
  // though the free 10 MiB plus one page would do; nothing cached to unmap
  // but [30, 40) has no whole page: OOM.
  EXPECT_THROW(h.engine.malloc(12 * kMiB, kStreamA), OutOfMemoryError);
  EXPECT_EQ(h.stats().num_ooms, 1);
  h.engine.free(a);
  h.engine.check_invariants();
}

TEST(ExpandableSegmentFaults, AMapRefusedHalfwayLeavesNothingMappedAndRetries) {
  Harness h(kExpandable);
  h.device.refuse_page_of_next_map(1);  // 50 MiB = 3 pages; the 2nd fails
  Block* a = h.engine.malloc(50 * kMiB, kStreamA);
  // Native's OOM path: release the cache (a full sync), try again: mapped.
  const DeviceStats s = h.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(h.device.mapped_pages(), 3u);
  EXPECT_EQ(h.device.used_bytes(), 60 * kMiB);
  EXPECT_EQ(a->address, segment_base(h.engine));
  h.engine.check_invariants();
}

TEST(ExpandableSegmentFaults, ADeviceThatRunsOutDuringAGrowthRaisesOomAndLeaksNothing) {
  Harness h(kExpandable, 100 * kMiB);
  Block* a = h.engine.malloc(60 * kMiB, kStreamA);
  // 60 more: pages 1 and 2 fit, the 3rd does not; both attempts undo theirs.
  EXPECT_THROW(h.engine.malloc(60 * kMiB, kStreamA), OutOfMemoryError);
  const DeviceStats s = h.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(h.device.mapped_pages(), 3u);
  EXPECT_EQ(h.device.used_bytes(), 60 * kMiB);
  EXPECT_EQ(h.now(s.reserved_bytes), int64_t(60 * kMiB));
  h.engine.check_invariants();
  // The engine goes on: 40 MiB fit.
  h.engine.free(a);
  Block* b = h.engine.malloc(90 * kMiB, kStreamA);
  EXPECT_EQ(b->address, segment_base(h.engine));
  h.engine.check_invariants();
}

TEST(ExpandableSegmentFaults, ADriverErrorDuringAGrowthChangesNothing) {
  Harness h(kExpandable);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);
  h.device.fail_page_of_next_map(1);
  EXPECT_THROW(h.engine.malloc(50 * kMiB, kStreamA), BackendError);
  EXPECT_EQ(h.device.mapped_pages(), 2u);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(40 * kMiB));
  h.engine.check_invariants();
  h.engine.free(a);
}

TEST(ExpandableSegmentHistory, MappingsAndUnmappingsAreTracedAsNativeNamesThem) {
  Harness h(kExpandable);
  HistoryRecorder history;
  history.enable(100, false);
  h.engine.add_observer(&history);
  Block* a = h.engine.malloc(30 * kMiB, kStreamA);
  const uintptr_t base = segment_base(h.engine);
  h.engine.free(a);
  h.engine.empty_cache();
  h.engine.remove_observer(&history);
  const std::vector<TraceEntry> t = history.entries();
  ASSERT_EQ(t.size(), 5u);
  EXPECT_STREQ(action_name(t[0].action), "segment_map");
  EXPECT_EQ(t[0].address, base);
  EXPECT_EQ(t[0].size, 40 * kMiB);
  EXPECT_EQ(t[0].stream, kStreamA);
  EXPECT_STREQ(action_name(t[1].action), "alloc");
  EXPECT_STREQ(action_name(t[4].action), "segment_unmap");
  EXPECT_EQ(t[4].address, base);
  EXPECT_EQ(t[4].size, 40 * kMiB);
}

}  // namespace
}  // namespace cachealloc::testing
