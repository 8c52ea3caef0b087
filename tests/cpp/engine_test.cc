// Tests of the engine's placement rules: rounding, pools and segment sizes,
// splitting, best fit, streams, merging, max_split_size, and the counters
// that follow them. Every expected number is worked out by hand from
// PyTorch 2.11's rules (c10/cuda/CUDACachingAllocator.cpp); addresses are
// offsets from the simulated device's base, which places segments first fit.
#include <gtest/gtest.h>

#include <memory>

#include "allocator/engine/blocks/size_policy.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

TEST(Rounding, RequestsAreAtLeast512AndMultiplesOf512) {
  const AllocatorConfig plain;
  EXPECT_EQ(round_request_size(1, plain), 512u);
  EXPECT_EQ(round_request_size(511, plain), 512u);
  EXPECT_EQ(round_request_size(512, plain), 512u);
  EXPECT_EQ(round_request_size(513, plain), 1024u);
  EXPECT_EQ(round_request_size(1200, plain), 1536u);
  EXPECT_EQ(round_request_size(kMiB + 1, plain), kMiB + 512);
  EXPECT_EQ(round_request_size(kGiB + 1, plain), kGiB + 512);

  Harness h;
  Block* b = h.engine.malloc(1, kStreamA);
  EXPECT_EQ(b->size, 512u);
  EXPECT_EQ(b->requested_size, 1u);
  EXPECT_EQ(h.now(h.stats().allocated_bytes), 512);
  EXPECT_EQ(h.now(h.stats().requested_bytes), 1);
}

TEST(Rounding, PowerOfTwoDivisionsApplyOnlyAboveDivisionsTimes512) {
  const AllocatorConfig four = AllocatorConfig::parse("roundup_power2_divisions:4");
  // 1200 <= 4 * 512: plain 512-byte rounding.
  EXPECT_EQ(round_request_size(1200, four), 1536u);
  // 3000 > 2048: steps of 2048 / 4 = 512 above 2048 -> 3072.
  EXPECT_EQ(round_request_size(3000, four), 3072u);
  // 1 MiB + 100 KiB: steps of 256 KiB above 1 MiB -> 1.25 MiB.
  EXPECT_EQ(round_request_size(kMiB + 100 * kKiB, four), kMiB + 256 * kKiB);
  // Powers of two and exact steps stay.
  EXPECT_EQ(round_request_size(kMiB, four), kMiB);
  EXPECT_EQ(round_request_size(kMiB + 256 * kKiB, four), kMiB + 256 * kKiB);
  EXPECT_EQ(round_request_size(kMiB + 256 * kKiB + 1, four), kMiB + 512 * kKiB);
  // 5 MiB + 1: steps of 1 MiB above 4 MiB -> 6 MiB; 100 MiB + 1: 16 MiB steps.
  EXPECT_EQ(round_request_size(5 * kMiB + 1, four), 6 * kMiB);
  EXPECT_EQ(round_request_size(100 * kMiB + 1, four), 112 * kMiB);

  Harness h("roundup_power2_divisions:4");
  Block* b = h.engine.malloc(kMiB + 100 * kKiB, kStreamA);
  EXPECT_EQ(b->size, kMiB + 256 * kKiB);
  EXPECT_EQ(h.now(h.stats().allocated_bytes, kLargePool), int64_t(kMiB + 256 * kKiB));
  EXPECT_EQ(h.now(h.stats().requested_bytes, kLargePool), int64_t(kMiB + 100 * kKiB));
}

TEST(Rounding, WithoutDivisionsAboveOneRoundingIsToMultiplesOf512) {
  // The engine skips the divisions table when has_power2_divisions is false;
  // that is exact only if round_to_min_blocks then agrees everywhere.
  const AllocatorConfig plain;
  const AllocatorConfig ones = AllocatorConfig::parse("roundup_power2_divisions:1");
  for (const AllocatorConfig* c : {&plain, &ones}) {
    EXPECT_FALSE(has_power2_divisions(*c));
    for (size_t size : {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{513},
                        size_t{4097}, kMiB - 1, kMiB + 1, 3 * kMiB + 7, kGiB + 1,
                        64 * kGiB + 513, kMaxRequestSize})
      EXPECT_EQ(round_to_min_blocks(size), round_request_size(size, *c)) << size;
  }
  EXPECT_TRUE(has_power2_divisions(AllocatorConfig::parse("roundup_power2_divisions:4")));
  EXPECT_TRUE(has_power2_divisions(
      AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]")));
}

TEST(Rounding, DivisionsFollowTheRequestsPowerOfTwoInterval) {
  // Intervals 0..8 get 1 (off), 512 MiB gets 2, 1 GiB and up 8 (see
  // config_test).
  const AllocatorConfig c = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]");
  EXPECT_EQ(round_request_size(kMiB + 1, c), kMiB + 512);
  EXPECT_EQ(round_request_size(100 * kMiB + 1, c), 100 * kMiB + 512);
  EXPECT_EQ(round_request_size(300 * kMiB + 1, c), 300 * kMiB + 512);
  // 600 MiB: steps of 512 / 2 = 256 MiB above 512 MiB -> 768 MiB.
  EXPECT_EQ(round_request_size(600 * kMiB, c), 768 * kMiB);
  EXPECT_EQ(round_request_size(kGiB + 1, c), kGiB + 128 * kMiB);
}

TEST(SmallPool, RequestsUpTo1MiBGet2MiBSegments) {
  Harness h;
  Block* a = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(a->address, kBase);
  EXPECT_EQ(Layout(h.engine),
            (Segments{{{0, kMiB, kAlloc, kBusy}, {kMiB, kMiB, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.now(h.stats().segment, kSmallPool), 1);
  EXPECT_EQ(h.now(h.stats().segment, kLargePool), 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kSmallPool), int64_t(2 * kMiB));
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(2 * kMiB));
  EXPECT_EQ(h.now(h.stats().allocation, kSmallPool), 1);
  EXPECT_EQ(h.now(h.stats().allocated_bytes, kSmallPool), int64_t(kMiB));
  EXPECT_EQ(h.now(h.stats().active_bytes, kSmallPool), int64_t(kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split, kSmallPool), 1);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes, kSmallPool), int64_t(kMiB));
  EXPECT_EQ(h.now(h.stats().allocated_bytes, kLargePool), 0);
  EXPECT_EQ(h.stats().num_device_alloc, 1);
}

TEST(SmallPool, SplitsDownTo512ByteRemainders) {
  Harness h;
  Block* a = h.engine.malloc(kMiB, kStreamA);
  Block* b = h.engine.malloc(kMiB - 512, kStreamA);  // leaves exactly 512
  Block* c = h.engine.malloc(1, kStreamA);           // takes that 512
  EXPECT_EQ(a->address, kBase);
  EXPECT_EQ(b->address, kBase + kMiB);
  EXPECT_EQ(c->address, kBase + 2 * kMiB - 512);
  EXPECT_EQ(c->size, 512u);
  EXPECT_EQ(h.now(h.stats().inactive_split, kSmallPool), 0);
  EXPECT_EQ(h.stats().num_device_alloc, 1);

  Block* d = h.engine.malloc(512, kStreamA);  // nothing cached: a new segment
  EXPECT_EQ(d->address, kBase + 2 * kMiB);
  EXPECT_EQ(h.now(h.stats().segment, kSmallPool), 2);
  EXPECT_EQ(h.now(h.stats().allocated_bytes, kSmallPool), int64_t(2 * kMiB + 512));
  EXPECT_EQ(h.now(h.stats().requested_bytes, kSmallPool), int64_t(2 * kMiB + 1));
  EXPECT_EQ(h.now(h.stats().inactive_split, kSmallPool), 1);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes, kSmallPool), int64_t(2 * kMiB - 512));
  EXPECT_EQ(h.stats().inactive_split[kSmallPool].peak, 1);
}

TEST(LargePool, RequestsAbove1MiBBelow10MiBGet20MiBSegments) {
  EXPECT_EQ(segment_size_for(kMiB, kLargeBuffer), 2 * kMiB);
  EXPECT_EQ(segment_size_for(kMiB + 512, kLargeBuffer), 20 * kMiB);
  EXPECT_EQ(segment_size_for(10 * kMiB - 512, kLargeBuffer), 20 * kMiB);
  EXPECT_EQ(segment_size_for(kMiB + 512, 40 * kMiB), 40 * kMiB);

  Harness h;
  Block* a = h.engine.malloc(kMiB + 1, kStreamA);
  EXPECT_EQ(a->size, kMiB + 512);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, kMiB + 512, kAlloc, kBusy},
                                         {kMiB + 512, 19 * kMiB - 512, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.now(h.stats().segment, kLargePool), 1);
  EXPECT_EQ(h.now(h.stats().segment, kSmallPool), 0);
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kLargePool), int64_t(20 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes, kLargePool), int64_t(19 * kMiB - 512));
}

TEST(LargePool, RequestsOf10MiBOrMoreGetSegmentsRoundedUpTo2MiB) {
  EXPECT_EQ(segment_size_for(10 * kMiB, kLargeBuffer), 10 * kMiB);
  EXPECT_EQ(segment_size_for(10 * kMiB + 512, kLargeBuffer), 12 * kMiB);

  Harness h;
  Block* a = h.engine.malloc(10 * kMiB, kStreamA);
  Block* b = h.engine.malloc(10 * kMiB + 1, kStreamA);
  EXPECT_EQ(a->size, 10 * kMiB);
  EXPECT_EQ(b->address, kBase + 10 * kMiB);
  EXPECT_EQ(b->size, 10 * kMiB + 512);
  EXPECT_EQ(h.now(h.stats().reserved_bytes, kLargePool), int64_t(22 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split, kLargePool), 1);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes, kLargePool), int64_t(2 * kMiB - 512));
}

TEST(LargePool, BlocksSplitOnlyWhenTheRemainderExceeds1MiB) {
  Harness h;
  // 11 MiB in a 12 MiB segment leaves exactly 1 MiB: handed out whole.
  Block* a = h.engine.malloc(11 * kMiB, kStreamA);
  EXPECT_EQ(a->size, 12 * kMiB);
  EXPECT_EQ(h.now(h.stats().allocated_bytes), int64_t(12 * kMiB));
  EXPECT_EQ(h.now(h.stats().requested_bytes), int64_t(11 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split), 0);
  // 512 bytes less leaves 1 MiB + 512: split.
  Block* b = h.engine.malloc(11 * kMiB - 512, kStreamA);
  EXPECT_EQ(b->size, 11 * kMiB - 512);
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 12 * kMiB, kAlloc, kBusy}},
                                        {{12 * kMiB, 11 * kMiB - 512, kAlloc, kBusy},
                                         {23 * kMiB - 512, kMiB + 512, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), int64_t(kMiB + 512));
}

TEST(BestFit, PicksTheSmallestCachedBlockThatFits) {
  Harness h;
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);  // at 0
  Block* b = h.engine.malloc(16 * kMiB, kStreamA);  // at 12
  Block* c = h.engine.malloc(14 * kMiB, kStreamA);  // at 28
  for (Block* x : {a, b, c}) h.engine.free(x);
  // 13 MiB fits 14 and 16: the 14 MiB block; its 1 MiB rest is not split off.
  Block* d = h.engine.malloc(13 * kMiB, kStreamA);
  EXPECT_EQ(d->address, kBase + 28 * kMiB);
  EXPECT_EQ(d->size, 14 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 3);
}

TEST(BestFit, LowestAddressWinsAmongEqualSizes) {
  Harness h;
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  Block* b = h.engine.malloc(12 * kMiB, kStreamA);
  Block* c = h.engine.malloc(12 * kMiB, kStreamA);
  h.engine.free(c);
  h.engine.free(a);
  h.engine.free(b);
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase);
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase + 12 * kMiB);
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase + 24 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 3);
}

TEST(Streams, CachedBlocksServeOnlyTheirOwnStream) {
  Harness h;
  h.engine.free(h.engine.malloc(12 * kMiB, kStreamA));
  h.engine.free(h.engine.malloc(512, kStreamA));  // small segment at 12 MiB
  // Same sizes on stream B: new segments, although A's blocks are free.
  Block* large_b = h.engine.malloc(12 * kMiB, kStreamB);
  Block* small_b = h.engine.malloc(512, kStreamB);
  EXPECT_EQ(large_b->address, kBase + 14 * kMiB);
  EXPECT_EQ(small_b->address, kBase + 26 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 4);
  // Stream A still gets its own cached blocks back.
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase);
  EXPECT_EQ(h.engine.malloc(512, kStreamA)->address, kBase + 12 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 4);
  // B's free block is the next in (stream, size) order, yet A may not take it.
  h.engine.free(large_b);
  EXPECT_EQ(h.engine.malloc(12 * kMiB, kStreamA)->address, kBase + 28 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 5);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(40 * kMiB));
}

TEST(Merge, FreeBlocksHoldNoAllocationContext) {
  // The engine relies on it: a hand-out without a context stores none, and
  // a merge does not clear the merged block's (block.h).
  Harness h;
  h.device.hold_events(true);
  const ContextPtr ctx = std::make_shared<CallContext>();
  Block* a = h.engine.malloc(512, kStreamA, ctx);
  Block* b = h.engine.malloc(512, kStreamA, ctx);
  EXPECT_EQ(a->context_when_allocated, ctx);
  h.engine.free(a);  // no free neighbour: no merge
  EXPECT_EQ(a->context_when_allocated, nullptr);
  h.engine.free(b);  // merges with a below and the rest above
  EXPECT_EQ(a->context_when_allocated, nullptr);
  EXPECT_NO_THROW(h.engine.check_invariants());

  // Freed after stream events: the context stays while the block waits.
  Block* c = h.engine.malloc(512, kStreamA, ctx);
  h.engine.record_stream(c, kStreamB);
  h.engine.free(c);
  EXPECT_EQ(c->context_when_allocated, ctx);
  h.device.complete_events();
  Block* d = h.engine.malloc(512, kStreamA);  // collects c first, then reuses it
  EXPECT_EQ(d, c);
  EXPECT_EQ(d->context_when_allocated, nullptr);
  h.engine.free(d);
  EXPECT_NO_THROW(h.engine.check_invariants());
}

TEST(Merge, FreedBlockMergesWithBothFreeNeighbours) {
  Harness h;
  // One 20 MiB segment: [a 2 | b 2 | c 2 | rest 14].
  Block* a = h.engine.malloc(2 * kMiB, kStreamA);
  Block* b = h.engine.malloc(2 * kMiB, kStreamA);
  Block* c = h.engine.malloc(2 * kMiB, kStreamA);
  EXPECT_EQ(h.now(h.stats().inactive_split), 1);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), int64_t(14 * kMiB));

  h.engine.free(a);  // a alone: a second inactive piece
  EXPECT_EQ(h.now(h.stats().inactive_split), 2);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), int64_t(16 * kMiB));
  h.engine.free(c);  // c joins the rest: still two pieces
  EXPECT_EQ(h.now(h.stats().inactive_split), 2);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), int64_t(18 * kMiB));
  h.engine.free(b);  // b joins both: the segment is whole again
  EXPECT_EQ(Layout(h.engine), (Segments{{{0, 20 * kMiB, kNotAlloc, kFree}}}));
  EXPECT_EQ(h.now(h.stats().inactive_split), 0);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), 0);
  // Totals: +18 (first split), -2, -2 (pieces cut from it), +2, +2, -18.
  EXPECT_EQ(h.stats().inactive_split_bytes[kAllPools].allocated, int64_t(22 * kMiB));
  EXPECT_EQ(h.stats().inactive_split_bytes[kAllPools].freed, int64_t(22 * kMiB));
  EXPECT_EQ(h.stats().inactive_split_bytes[kAllPools].peak, int64_t(18 * kMiB));
  EXPECT_EQ(h.stats().inactive_split[kLargePool].allocated, 2);
  EXPECT_EQ(h.stats().inactive_split[kLargePool].freed, 2);
  EXPECT_EQ(h.stats().inactive_split[kLargePool].peak, 2);
  EXPECT_EQ(h.now(h.stats().active), 0);
  EXPECT_EQ(h.stats().active[kAllPools].peak, 3);
}

TEST(MaxSplitSize, OversizeBlocksAreNeverSplit) {
  Harness h("max_split_size_mb:64");
  h.engine.free(h.engine.malloc(100 * kMiB, kStreamA));
  Block* b = h.engine.malloc(90 * kMiB, kStreamA);  // reuses the 100 MiB whole
  EXPECT_EQ(b->address, kBase);
  EXPECT_EQ(b->size, 100 * kMiB);
  EXPECT_EQ(h.now(h.stats().allocated_bytes), int64_t(100 * kMiB));
  EXPECT_EQ(h.now(h.stats().requested_bytes), int64_t(90 * kMiB));
  EXPECT_EQ(h.now(h.stats().inactive_split), 0);
  EXPECT_EQ(h.stats().oversize_allocations.current, 1);
  EXPECT_EQ(h.stats().oversize_allocations.allocated, 2);
  EXPECT_EQ(h.stats().oversize_allocations.freed, 1);
  EXPECT_EQ(h.stats().oversize_segments.current, 1);
  EXPECT_EQ(h.stats().num_device_alloc, 1);
  EXPECT_EQ(h.stats().max_split_size, int64_t(64 * kMiB));
}

TEST(MaxSplitSize, SegmentAtLeastMaxSplitIsOversizeEvenIfItsBlockIsNot) {
  Harness h("max_split_size_mb:64");
  // 62 MiB + 512 gets a 64 MiB segment; the request is below the limit, so
  // the 2 MiB - 512 rest is split off.
  Block* a = h.engine.malloc(62 * kMiB + 1, kStreamA);
  EXPECT_EQ(a->size, 62 * kMiB + 512);
  EXPECT_EQ(h.stats().oversize_segments.current, 1);
  EXPECT_EQ(h.stats().oversize_allocations.current, 0);
  EXPECT_EQ(h.now(h.stats().inactive_split_bytes), int64_t(2 * kMiB - 512));
}

TEST(MaxSplitSize, OversizeCachedBlockServesLargeRequestsOnlyWithin20MiB) {
  Harness h("max_split_size_mb:64");
  h.engine.free(h.engine.malloc(100 * kMiB, kStreamA));
  // 100 >= 80 + 20: too wasteful, a new 80 MiB segment.
  Block* b = h.engine.malloc(80 * kMiB, kStreamA);
  EXPECT_EQ(b->address, kBase + 100 * kMiB);
  // 100 < 80 MiB + 512 + 20: the cached block serves it.
  Block* c = h.engine.malloc(80 * kMiB + 1, kStreamA);
  EXPECT_EQ(c->address, kBase);
  EXPECT_EQ(c->size, 100 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 2);
}

TEST(MaxSplitSize, RoundingAllowanceFollowsMaxNonSplitRoundingMb) {
  Harness h("max_split_size_mb:64,max_non_split_rounding_mb:40");
  h.engine.free(h.engine.malloc(100 * kMiB, kStreamA));
  // 100 < 70 + 40: served from the cache.
  EXPECT_EQ(h.engine.malloc(70 * kMiB, kStreamA)->address, kBase);
  EXPECT_EQ(h.stats().num_device_alloc, 1);
}

TEST(MaxSplitSize, OversizeCachedBlockNeverServesRequestsBelowTheLimit) {
  Harness h("max_split_size_mb:64");
  h.engine.free(h.engine.malloc(100 * kMiB, kStreamA));
  // 63 MiB would fit with little waste, but the block is oversize.
  Block* b = h.engine.malloc(63 * kMiB, kStreamA);
  EXPECT_EQ(b->address, kBase + 100 * kMiB);
  EXPECT_EQ(b->size, 64 * kMiB);  // 1 MiB rest: not split
  Block* c = h.engine.malloc(2 * kMiB, kStreamA);
  EXPECT_EQ(c->address, kBase + 164 * kMiB);
  EXPECT_EQ(h.stats().num_device_alloc, 3);
  EXPECT_EQ(Layout(h.engine)[0], (std::vector<BlockShape>{{0, 100 * kMiB, kNotAlloc, kFree}}));
}

TEST(StatsReset, ResetPeakSetsEveryPeakToItsCurrentValue) {
  Harness h;
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  Block* b = h.engine.malloc(14 * kMiB, kStreamA);
  h.engine.free(a);
  EXPECT_EQ(h.stats().allocated_bytes[kAllPools].peak, int64_t(26 * kMiB));
  h.collector.reset_peak();
  DeviceStats s = h.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, int64_t(14 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kLargePool].peak, int64_t(14 * kMiB));
  EXPECT_EQ(s.allocation[kLargePool].peak, 1);
  EXPECT_EQ(s.reserved_bytes[kAllPools].peak, int64_t(26 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, int64_t(26 * kMiB));  // untouched
  h.engine.free(b);
  s = h.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, int64_t(14 * kMiB));
}

TEST(StatsReset, ResetAccumulatedZeroesTotalsAndCountersButNotCurrent) {
  Harness h;
  Block* a = h.engine.malloc(12 * kMiB, kStreamA);
  Block* b = h.engine.malloc(14 * kMiB, kStreamA);
  h.engine.free(a);
  h.collector.reset_accumulated();
  DeviceStats s = h.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].freed, 0);
  EXPECT_EQ(s.allocated_bytes[kLargePool].freed, 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].current, int64_t(14 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, int64_t(26 * kMiB));
  EXPECT_EQ(s.num_device_alloc, 0);
  h.engine.free(b);
  h.engine.empty_cache();
  s = h.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].freed, int64_t(14 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kLargePool].freed, int64_t(14 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, 0);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.segment[kAllPools].freed, 2);
  EXPECT_EQ(s.segment[kAllPools].current, 0);
  // Totals count again after the reset.
  h.engine.free(h.engine.malloc(kMiB, kStreamA));
  s = h.stats();
  EXPECT_EQ(s.allocated_bytes[kSmallPool].allocated, int64_t(kMiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].freed, int64_t(15 * kMiB));
}

}  // namespace
}  // namespace cachealloc::testing
