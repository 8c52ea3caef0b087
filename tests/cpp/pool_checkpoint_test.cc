// Pool checkpoints (PyTorch's cudagraph trees): a pool's layout saved and
// put back, with native's steps (free what is allocated, carve the saved
// blocks out, free those that were free), refusals that change nothing,
// and the live-allocation check. Worked out by hand; addresses are offsets
// from the simulated device's base.
#include <gtest/gtest.h>

#include <stdexcept>

#include "allocator/front/caching_allocator.h"
#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr PoolId kGraphPool{1, 0};
const PoolFilter kEveryStream = [](StreamId) { return true; };

// A "capture" into the graph pool: x (live), y (freed), z (live) packed in
// one small segment, and w in a large segment.
struct Captured {
  Block *x, *z, *w;
};
Captured capture(Harness& h) {
  h.engine.begin_allocate_to_pool(kGraphPool, kEveryStream);
  Block* x = h.engine.malloc(1024, kStreamA);
  Block* y = h.engine.malloc(2048, kStreamA);
  Block* z = h.engine.malloc(512, kStreamA);
  Block* w = h.engine.malloc(4 * kMiB, kStreamA);
  h.engine.free(y);
  h.engine.end_allocate_to_pool(kGraphPool);
  return {x, z, w};
}

TEST(PoolCheckpoint, SavesEverySegmentsBlocksInAddressOrder) {
  Harness h;
  capture(h);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  EXPECT_EQ(cp.pool, kGraphPool);
  ASSERT_EQ(cp.segments.size(), 2u);
  const auto& small = cp.segments[0];
  EXPECT_TRUE(small.is_small);
  ASSERT_EQ(small.blocks.size(), 4u);  // x, y (free), z, the rest (free)
  EXPECT_EQ(small.blocks[0].address, kBase);
  EXPECT_EQ(small.blocks[0].size, 1024u);
  EXPECT_TRUE(small.blocks[0].allocated);
  EXPECT_FALSE(small.blocks[1].allocated);
  EXPECT_EQ(small.blocks[2].address, kBase + 3072);
  EXPECT_EQ(small.blocks[3].size, 2 * kMiB - 3584);
  const auto& large = cp.segments[1];
  EXPECT_FALSE(large.is_small);
  ASSERT_EQ(large.blocks.size(), 2u);  // w, and the 16 MiB remainder
  EXPECT_EQ(large.blocks[0].size, 4 * kMiB);
}

TEST(PoolCheckpoint, RestoreFreesWhatIsAllocatedAndRecreatesTheSavedLiveBlocks) {
  Harness h;
  Captured c = capture(h);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  const Segments saved = Layout(h.engine);
  // "Replay" and beyond: x dies, a new block t is carved where y was.
  h.engine.free(c.x);
  h.engine.begin_allocate_to_pool(kGraphPool, kEveryStream);
  Block* t = h.engine.malloc(1536, kStreamA);  // best fit: x and y's 3 KiB hole
  h.engine.end_allocate_to_pool(kGraphPool);
  EXPECT_EQ(t->address, kBase);
  const int64_t allocs_before = h.stats().allocation[kAllPools].allocated;

  const PoolRestore r = h.engine.restore_pool(cp);
  // Freed: everything allocated now (t, z, w), segment by segment.
  EXPECT_EQ(r.freed, (std::vector<uintptr_t>{kBase, kBase + 3072, kBase + 2 * kMiB}));
  // Allocated again: the checkpoint's live blocks x, z, w.
  ASSERT_EQ(r.allocated.size(), 3u);
  EXPECT_EQ(r.allocated[0]->address, kBase);
  EXPECT_EQ(r.allocated[1]->address, kBase + 3072);
  EXPECT_EQ(r.allocated[2]->address, kBase + 2 * kMiB);
  EXPECT_EQ(Layout(h.engine), saved);
  // Statistics saw every step: 4 blocks carved in the small segment and 2
  // in the large one.
  EXPECT_EQ(h.stats().allocation[kAllPools].allocated, allocs_before + 6);
  EXPECT_EQ(h.now(h.stats().allocation), 3);
  // Restored blocks requested exactly their size (native's orig_size).
  EXPECT_EQ(r.allocated[0]->requested_size, 1024u);
  h.engine.check_invariants();
  for (Block* b : r.allocated) h.engine.free(b);
  h.engine.check_invariants();
}

TEST(PoolCheckpoint, RestoreSplitsAsTheCheckpointSaysWhateverTheRules) {
  Harness h;
  capture(h);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  const Segments saved = Layout(h.engine);
  // no_split now forbids splitting: the restore still carves the blocks.
  h.engine.set_no_split(kGraphPool);
  const PoolRestore r = h.engine.restore_pool(cp);
  EXPECT_EQ(Layout(h.engine), saved);
  h.engine.check_invariants();
  for (Block* b : r.allocated) h.engine.free(b);
}

TEST(PoolCheckpoint, RefusedRestoresChangeNothing) {
  Harness h;
  capture(h);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  const Segments before = Layout(h.engine);
  const DeviceStats stats_before = h.stats();

  PoolCheckpoint moved = cp;  // a segment that is not the pool's
  moved.segments[0].blocks.front().address += 2 * kMiB;
  EXPECT_THROW(h.engine.restore_pool(moved), std::invalid_argument);
  PoolCheckpoint untiled = cp;  // blocks that do not add up to the segment
  untiled.segments[0].blocks.pop_back();
  EXPECT_THROW(h.engine.restore_pool(untiled), std::invalid_argument);
  PoolCheckpoint odd = cp;  // not a multiple of 512
  odd.segments[0].blocks[0].size += 1;
  EXPECT_THROW(h.engine.restore_pool(odd), std::invalid_argument);
  PoolCheckpoint twice = cp;  // one segment listed twice
  twice.segments.push_back(twice.segments[0]);
  EXPECT_THROW(h.engine.restore_pool(twice), std::invalid_argument);
  PoolCheckpoint merged = cp;  // two free neighbours: no engine holds that
  merged.segments[0].blocks[0].allocated = false;
  merged.segments[0].blocks[1].allocated = false;
  EXPECT_THROW(h.engine.restore_pool(merged), std::invalid_argument);
  PoolCheckpoint other_stream = cp;
  other_stream.segments[0].stream = kStreamB;
  EXPECT_THROW(h.engine.restore_pool(other_stream), std::invalid_argument);
  PoolCheckpoint other_device = cp;
  other_device.device = 1;
  EXPECT_THROW(h.engine.restore_pool(other_device), std::invalid_argument);
  PoolCheckpoint unknown = cp;
  unknown.pool = {9, 0};
  EXPECT_THROW(h.engine.restore_pool(unknown), std::invalid_argument);

  EXPECT_EQ(Layout(h.engine), before);
  EXPECT_EQ(h.stats().allocation[kAllPools].allocated,
            stats_before.allocation[kAllPools].allocated);
  h.engine.check_invariants();
}

TEST(PoolCheckpoint, ReleasedPoolsAndBlocksWaitingForEventsAreRefused) {
  Harness h;
  Captured c = capture(h);
  h.device.hold_events(true);
  h.engine.record_stream(c.z, kStreamB);
  h.engine.free(c.z);  // waits for stream B
  EXPECT_THROW(h.engine.checkpoint_pool(kGraphPool), std::invalid_argument);
  h.device.complete_events();
  h.engine.empty_cache();  // syncs: z is cached
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  h.engine.record_stream(c.x, kStreamB);  // x's free would leave it pending
  EXPECT_THROW(h.engine.restore_pool(cp), std::invalid_argument);
  h.engine.release_pool(kGraphPool);  // the graph is gone: use count 0
  EXPECT_THROW(h.engine.checkpoint_pool(kGraphPool), std::invalid_argument);
  EXPECT_THROW(h.engine.restore_pool(cp), std::invalid_argument);
  h.engine.check_invariants();
}

TEST(PoolCheckpoint, SegmentsReservedAfterTheCheckpointAreLeftFree) {
  Harness h;
  capture(h);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  h.engine.begin_allocate_to_pool(kGraphPool, kEveryStream);
  Block* later = h.engine.malloc(30 * kMiB, kStreamA);  // a third segment
  h.engine.end_allocate_to_pool(kGraphPool);
  const uintptr_t later_address = later->address;
  const PoolRestore r = h.engine.restore_pool(cp);
  EXPECT_EQ(r.freed.back(), later_address);
  EXPECT_EQ(r.allocated.size(), 3u);  // x, z, w
  const Segments now = Layout(h.engine);
  ASSERT_EQ(now.size(), 3u);
  const BlockShape whole_free{later_address - kBase, 30 * kMiB, kNotAlloc, kFree};
  EXPECT_EQ(now[2], (std::vector<BlockShape>{whole_free}));
  h.engine.check_invariants();
  for (Block* b : r.allocated) h.engine.free(b);
}

TEST(PoolCheckpoint, CheckpointInsertsDeferredEventsFirstAsNative) {
  Harness h;
  h.device.hold_events(true);
  Captured c = capture(h);
  // z is used on B during a new route and freed there: deferred. With the
  // route over (no malloc since), the checkpoint inserts its events: B was
  // noted during the route, so it is dropped and z is cached at once.
  h.engine.begin_allocate_to_pool(kGraphPool, kEveryStream);
  h.engine.record_stream(c.z, kStreamB);
  h.engine.free(c.z);
  h.engine.end_allocate_to_pool(kGraphPool);
  const PoolCheckpoint cp = h.engine.checkpoint_pool(kGraphPool);
  EXPECT_EQ(h.device.live_events(), 0u);
  // z cached: it merged with y's free bytes and the rest of the segment.
  ASSERT_EQ(cp.segments[0].blocks.size(), 2u);
  EXPECT_TRUE(cp.segments[0].blocks[0].allocated);  // x
  EXPECT_FALSE(cp.segments[0].blocks[1].allocated);
  // x was used on B before the route: its deferred free gets an event, which
  // is still pending, so the checkpoint is refused (the event stays).
  h.engine.record_stream(c.x, kStreamB);
  h.engine.begin_allocate_to_pool(kGraphPool, kEveryStream);
  h.engine.free(c.x);
  h.engine.end_allocate_to_pool(kGraphPool);
  EXPECT_THROW(h.engine.checkpoint_pool(kGraphPool), std::invalid_argument);
  EXPECT_EQ(h.device.live_events(), 1u);
  h.engine.check_invariants();
}

TEST(PoolCheckpoint, LiveAllocationCheckComparesAddressesExactly) {
  Harness h;
  Captured c = capture(h);
  EXPECT_TRUE(h.engine.pool_allocations_are(kGraphPool, {c.x->address, c.z->address,
                                                         c.w->address}));
  EXPECT_FALSE(h.engine.pool_allocations_are(kGraphPool, {c.x->address, c.z->address}));
  EXPECT_FALSE(h.engine.pool_allocations_are(
      kGraphPool, {c.x->address, c.z->address, c.w->address, kBase + 1024}));
  EXPECT_THROW(h.engine.pool_allocations_are({7, 0}, {}), std::invalid_argument);
}

TEST(PoolCheckpoint, TheFrontKeepsItsPointerTableInStep) {
  SimulatedDevice device(8 * kGiB);
  CachingAllocator a(AllocatorConfig{}, {&device});
  a.with_device(0, [](DeviceCachingAllocator& e) {
    e.begin_allocate_to_pool(kGraphPool, kEveryStream);
  });
  const uintptr_t x = a.allocate(1024, 0, kStreamA);
  a.with_device(0, [](DeviceCachingAllocator& e) { e.end_allocate_to_pool(kGraphPool); });
  const PoolCheckpoint cp = a.checkpoint_pool(0, kGraphPool);
  a.with_device(0, [](DeviceCachingAllocator& e) {
    e.begin_allocate_to_pool(kGraphPool, kEveryStream);
  });
  const uintptr_t y = a.allocate(4096, 0, kStreamA);  // after x
  a.with_device(0, [](DeviceCachingAllocator& e) { e.end_allocate_to_pool(kGraphPool); });
  a.deallocate(x, 0);
  const auto r = a.restore_pool(cp);
  EXPECT_EQ(r.freed, (std::vector<uintptr_t>{y}));
  ASSERT_EQ(r.allocated.size(), 1u);
  EXPECT_EQ(r.allocated[0], (std::pair<uintptr_t, size_t>{x, 1024}));
  EXPECT_THROW(a.deallocate(y, 0), InvalidPointerError);  // freed by the restore
  a.deallocate(x, 0);                                      // held again
  a.with_device(0, [](DeviceCachingAllocator& e) { e.check_invariants(); });
}

}  // namespace
}  // namespace cachealloc::testing
