// Private pools (PyTorch's MemPool): routing, use counts, release, no_split,
// use_on_oom, and refused calls. Expected numbers are worked out by hand
// from PyTorch 2.11's rules (private_pool.h); addresses are offsets from
// the simulated device's base (first fit, 2 MiB aligned).
#include <gtest/gtest.h>

#include <stdexcept>

#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr PoolId kPool{0, 1};
constexpr PoolId kOtherPool{0, 2};
const PoolFilter kEveryStream = [](StreamId) { return true; };

std::vector<PoolId> pool_ids(const DeviceCachingAllocator& e) {
  std::vector<PoolId> out;
  for (const SegmentView& s : e.segments()) out.push_back(s.pool_id);
  return out;
}

TEST(PrivatePool, RoutedMallocsGetSegmentsOfTheirOwnAndFreesReturnThere) {
  Harness h;
  Block* a = h.engine.malloc(512, kStreamA);  // default small segment at 0
  h.engine.create_or_incref_pool(kPool);      // MemPool(): use count 1
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);  // use_mem_pool: +1
  EXPECT_EQ(h.engine.pool_use_count(kPool), 2);
  // The default segment has 2 MiB - 512 free, but the pool never uses it.
  Block* b = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(b->address, kBase + 2 * kMiB);
  Block* c = h.engine.malloc(3 * kMiB, kStreamA);  // the pool's large half: 20 MiB segment
  EXPECT_EQ(c->address, kBase + 4 * kMiB);
  h.engine.end_allocate_to_pool(kPool);
  h.engine.release_pool(kPool);  // use_mem_pool's exit
  EXPECT_EQ(h.engine.pool_use_count(kPool), 1);
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{{}, kPool, kPool}));

  // Freed into the pool: a default request does not see the pool's block.
  h.engine.free(b);
  Block* d = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(d->address, kBase + 512);
  // Statistics count pool blocks as any other (no per-pool families).
  EXPECT_EQ(h.now(h.stats().segment), 3);
  EXPECT_EQ(h.now(h.stats().allocation), 3);  // a, c, d
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(24 * kMiB));
  // cacheInfo counts the pool's cached blocks: the rest of the pool's large
  // segment (17 MiB) is larger than any default free block (2 MiB - 1 KiB).
  EXPECT_EQ(h.engine.largest_cached_block(), 20 * kMiB - 3 * kMiB);
  h.engine.check_invariants();
  h.engine.free(a);
  h.engine.free(c);
  h.engine.free(d);
  h.engine.check_invariants();
}

TEST(PrivatePool, OnlyStreamsTheFilterAcceptsAreRoutedAndTheNewestRouteWins) {
  Harness h;
  h.engine.begin_allocate_to_pool(kPool, [](StreamId s) { return s == kStreamB; });
  EXPECT_EQ(h.engine.pool_use_count(kPool), 1);  // made by begin: one use
  Block* a = h.engine.malloc(512, kStreamA);      // default
  Block* b = h.engine.malloc(512, kStreamB);      // kPool
  h.engine.begin_allocate_to_pool(kOtherPool, kEveryStream);
  Block* c = h.engine.malloc(512, kStreamB);  // kOtherPool: newest route first
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{{}, kPool, kOtherPool}));
  EXPECT_EQ(a->address, kBase);
  EXPECT_EQ(b->address, kBase + 2 * kMiB);
  EXPECT_EQ(c->address, kBase + 4 * kMiB);
  h.engine.end_allocate_to_pool(kPool);
  h.engine.end_allocate_to_pool(kOtherPool);
  h.engine.check_invariants();
}

TEST(PrivatePool, AReleasedPoolGivesItsSegmentsBackAtEmptyCacheAndIsErased) {
  Harness h;
  h.engine.create_or_incref_pool(kPool);
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
  Block* live = h.engine.malloc(512, kStreamA);       // small segment at 0
  Block* cached = h.engine.malloc(30 * kMiB, kStreamA);  // large segment at 2 MiB
  h.engine.end_allocate_to_pool(kPool);
  h.engine.release_pool(kPool);
  h.engine.free(cached);
  Block* other = h.engine.malloc(512, kStreamA);  // default segment after them
  EXPECT_EQ(other->address, kBase + 32 * kMiB);

  // The pool is still held (by its MemPool): empty_cache leaves it alone.
  h.engine.empty_cache();
  EXPECT_EQ(h.stats().num_device_free, 0);
  h.engine.release_pool(kPool);  // the MemPool goes: use count 0, freeable
  EXPECT_EQ(h.engine.pool_use_count(kPool), 0);
  // emptyCache(pool id), as ~MemPool calls it: only that pool's whole
  // cached segments go, after a sync of its blocks' events.
  const int64_t syncs = h.stats().num_sync_all_streams;
  h.engine.empty_cache(nullptr, kPool);
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.stats().num_sync_all_streams, syncs + 1);
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{kPool, {}}));
  EXPECT_TRUE(h.engine.has_pool(kPool));  // it still holds `live`'s segment
  h.engine.check_invariants();

  // The live block stays usable; freed, it returns to the freeable pool,
  // and the next full empty_cache releases it and erases the pool.
  h.engine.free(live);
  h.engine.empty_cache();
  EXPECT_FALSE(h.engine.has_pool(kPool));
  EXPECT_EQ(h.stats().num_device_free, 2);
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{{}}));
  h.engine.check_invariants();
}

TEST(PrivatePool, NoSplitHandsOutWholeBlocks) {
  Harness h;
  h.engine.create_or_incref_pool(kPool);
  h.engine.set_no_split(kPool);
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
  Block* a = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(a->size, 2 * kMiB);  // the whole small segment
  Block* b = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(b->address, kBase + 2 * kMiB);  // a second segment, none split
  EXPECT_EQ(h.now(h.stats().allocated_bytes), int64_t(4 * kMiB));
  EXPECT_EQ(h.now(h.stats().requested_bytes), 1024);
  EXPECT_EQ(h.now(h.stats().inactive_split), 0);
  h.engine.end_allocate_to_pool(kPool);
  // Default requests still split.
  Block* c = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(c->size, 512u);
  h.engine.check_invariants();
}

TEST(PrivatePool, UseOnOomServesADefaultRequestFromThePoolsCachedBlocks) {
  Harness h;
  h.engine.set_memory_limit(40 * kMiB);
  h.engine.create_or_incref_pool(kPool);
  h.engine.set_use_on_oom(kPool, true);
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
  Block* p = h.engine.malloc(8 * kMiB, kStreamA);  // pool: 20 MiB segment at 0
  h.engine.end_allocate_to_pool(kPool);
  h.engine.free(p);
  Block* d = h.engine.malloc(8 * kMiB, kStreamA);  // default: 20 MiB segment at 20
  EXPECT_EQ(d->address, kBase + 20 * kMiB);
  // 16 MiB needs a 16 MiB segment, which would pass the 40 MiB limit, and
  // d's 12 MiB remainder is too small: the pool's cached 20 MiB block
  // serves the request instead, before anything is released.
  Block* e = h.engine.malloc(16 * kMiB, kStreamA);
  EXPECT_EQ(e->address, kBase);
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{kPool, {}}));
  EXPECT_EQ(h.stats().num_device_free, 0);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
  // Freed, it goes back to the pool it belongs to; without use_on_oom the
  // same request runs out of memory (the pool is held, so not released).
  h.engine.free(e);
  h.engine.set_use_on_oom(kPool, false);
  EXPECT_THROW(h.engine.malloc(16 * kMiB, kStreamA), OutOfMemoryError);
  h.engine.check_invariants();
}

TEST(PrivatePool, WhileRoutedAnOomDoesNotEmptyTheWholeCache) {
  Harness h;
  h.engine.set_memory_limit(40 * kMiB);
  Block* a = h.engine.malloc(24 * kMiB, kStreamA);  // default, 24 MiB segment
  h.engine.free(a);
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
  // The pool needs a 20 MiB segment; 24 + 20 > 40, and native frees cached
  // segments for a retry only while no pool is routed to: out of memory,
  // with the default segment still cached.
  EXPECT_THROW(h.engine.malloc(8 * kMiB, kStreamA), OutOfMemoryError);
  EXPECT_EQ(h.stats().num_device_free, 0);
  EXPECT_EQ(h.stats().num_alloc_retries, 0);
  h.engine.end_allocate_to_pool(kPool);
  // Not routed: 24 + 30 > 40, so the retry frees the cached segment first.
  Block* b = h.engine.malloc(30 * kMiB, kStreamA);
  EXPECT_EQ(h.stats().num_device_free, 1);
  EXPECT_EQ(h.stats().num_alloc_retries, 1);
  h.engine.free(b);
  h.engine.check_invariants();
}

// A caller may release a pool while its route is still open (the C API and
// torch's private calls allow it). The pool must outlive the route: it was
// erased by the next empty_cache, and the route's next malloc read freed
// memory (found by review, under ASan).
TEST(PrivatePool, AReleasedPoolStaysWhileARouteStillUsesIt) {
  Harness h;
  h.engine.begin_allocate_to_pool(kPool, kEveryStream);  // use count 1
  h.engine.release_pool(kPool);                          // 0: freeable, still routed
  h.engine.empty_cache();
  EXPECT_TRUE(h.engine.has_pool(kPool));
  Block* b = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(pool_ids(h.engine), (std::vector<PoolId>{kPool}));
  h.engine.check_invariants();
  h.engine.free(b);
  h.engine.end_allocate_to_pool(kPool);
  h.engine.empty_cache();  // no route now: segment returned, pool erased
  EXPECT_FALSE(h.engine.has_pool(kPool));
  EXPECT_EQ(h.stats().num_device_free, 1);
  h.engine.check_invariants();
}

TEST(PrivatePool, RefusedCallsNameTheProblemAndChangeNothing) {
  Harness h;
  EXPECT_THROW(h.engine.create_or_incref_pool(PoolId{}), std::invalid_argument);
  EXPECT_THROW(h.engine.begin_allocate_to_pool(PoolId{}, kEveryStream), std::invalid_argument);
  EXPECT_THROW(h.engine.begin_allocate_to_pool(kPool, nullptr), std::invalid_argument);
  EXPECT_FALSE(h.engine.has_pool(kPool));
  try {
    h.engine.release_pool(kPool);
    FAIL() << "release_pool of an unknown pool did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "release_pool: no memory pool (0, 1) on device 0");
  }
  EXPECT_THROW(h.engine.end_allocate_to_pool(kPool), std::invalid_argument);
  EXPECT_THROW(h.engine.pool_use_count(kPool), std::invalid_argument);
  EXPECT_THROW(h.engine.set_no_split(kPool), std::invalid_argument);

  h.engine.begin_allocate_to_pool(kPool, kEveryStream);
  EXPECT_THROW(h.engine.begin_allocate_to_pool(kPool, kEveryStream), std::invalid_argument);
  EXPECT_EQ(h.engine.pool_use_count(kPool), 1);
  h.engine.end_allocate_to_pool(kPool);
  EXPECT_THROW(h.engine.end_allocate_to_pool(kPool), std::invalid_argument);
  h.engine.release_pool(kPool);
  EXPECT_THROW(h.engine.release_pool(kPool), std::invalid_argument);
  EXPECT_THROW(h.engine.create_or_incref_pool(kPool), std::invalid_argument);
  EXPECT_EQ(h.engine.pool_use_count(kPool), 0);
  h.engine.check_invariants();
  h.engine.empty_cache();  // holds no segment: erased
  EXPECT_FALSE(h.engine.has_pool(kPool));
}

}  // namespace
}  // namespace cachealloc::testing
