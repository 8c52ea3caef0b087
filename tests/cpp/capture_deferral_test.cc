// Frees while a private pool is routed to (PyTorch's CUDA graph capture and
// use_mem_pool): a block used on other streams gets no event while a route
// is open, since recording or querying an event on a capturing stream is an
// error. Its events wait for the first malloc (or synchronizing empty_cache)
// after every route has ended, and the streams recorded during a route are
// dropped then, as native's insert_events_deferred_until_no_capture does.
// Expected numbers are worked out by hand; addresses are offsets from the
// simulated device's base.
#include <gtest/gtest.h>

#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr PoolId kGraphPool{1, 0};  // as CUDAGraph's ids: (capture id, 0)
constexpr StreamId kStreamC = 0x300;
const PoolFilter kStreamAOnly = [](StreamId s) { return s == kStreamA; };

TEST(CaptureDeferral, AFreeDuringARouteRecordsNoEventUntilTheRouteEnds) {
  Harness h;
  h.device.hold_events(true);  // recorded events stay pending
  Block* a = h.engine.malloc(512, kStreamA);  // default pool, before the route
  h.engine.record_stream(a, kStreamB);
  h.engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);  // capture_begin
  h.engine.free(a);
  // Free requested, no event: the block waits, neither allocated nor free.
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_EQ(Layout(h.engine)[0][0], (BlockShape{0, 512, kNotAlloc, kBusy}));
  EXPECT_FALSE(h.engine.idle());
  EXPECT_EQ(h.now(h.stats().allocation), 0);
  EXPECT_EQ(h.now(h.stats().active), 1);  // still active, as native
  // A malloc while routed neither records nor processes anything.
  Block* in_graph = h.engine.malloc(512, kStreamA);  // the graph's pool: new segment
  EXPECT_EQ(in_graph->address, kBase + 2 * kMiB);
  EXPECT_EQ(h.device.live_events(), 0u);
  h.engine.check_invariants();

  h.engine.end_allocate_to_pool(kGraphPool);  // capture_end: still nothing
  EXPECT_EQ(h.device.live_events(), 0u);
  // The first malloc after the routes: the deferred event is recorded on
  // stream B and queried (pending), so the block still waits.
  Block* b = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(h.device.live_events(), 1u);
  EXPECT_EQ(b->address, kBase + 512);
  EXPECT_EQ(Layout(h.engine)[0][0], (BlockShape{0, 512, kNotAlloc, kBusy}));
  h.engine.check_invariants();
  // Once stream B's work is done the next malloc caches it.
  h.device.complete_events();
  Block* c = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(c->address, kBase);  // the freed block, reused
  EXPECT_EQ(h.device.live_events(), 0u);
  for (Block* x : {in_graph, b, c}) h.engine.free(x);
  h.engine.check_invariants();
  EXPECT_TRUE(h.engine.idle());
}

TEST(CaptureDeferral, StreamsRecordedDuringARouteAreDroppedAtTheDeferredInsert) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(512, kStreamA);
  Block* b = h.engine.malloc(512, kStreamA);
  h.engine.record_stream(a, kStreamB);  // before: kept
  h.engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);
  h.engine.record_stream(a, kStreamC);  // during: dropped
  h.engine.record_stream(b, kStreamC);  // during: b's only use, dropped
  h.engine.record_stream(b, kStreamA);  // its own stream: no use at all
  h.engine.free(a);
  h.engine.free(b);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.engine.check_invariants();
  // One event (a on B); b had only uses from the route, so it is cached at
  // once, without an event, and merges with the free rest of the segment.
  const int64_t completed_before = h.stats().active_bytes[kAllPools].freed;
  Block* c = h.engine.malloc(4 * kKiB, kStreamA);
  EXPECT_EQ(h.device.live_events(), 1u);
  EXPECT_EQ(h.stats().active_bytes[kAllPools].freed, completed_before + 512);  // b's
  EXPECT_EQ(c->address, kBase + 512);  // b's place, merged with the rest
  EXPECT_EQ(Layout(h.engine)[0][0], (BlockShape{0, 512, kNotAlloc, kBusy}));  // a waits on B
  h.engine.check_invariants();
  h.device.complete_events();
  h.engine.free(c);
  h.engine.empty_cache();  // syncs: a is cached, the segment returned
  EXPECT_TRUE(h.engine.segments().empty());
  h.engine.check_invariants();
}

TEST(CaptureDeferral, AStreamRecordedBeforeAndDuringARouteIsDroppedAsNative) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(512, kStreamA);
  h.engine.record_stream(a, kStreamB);
  h.engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);
  h.engine.record_stream(a, kStreamB);  // again, during the route
  h.engine.free(a);
  h.engine.end_allocate_to_pool(kGraphPool);
  Block* b = h.engine.malloc(512, kStreamA);
  // Native's set difference removes B altogether: no event, a is reused.
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_EQ(b->address, kBase);
  h.engine.free(b);
  h.engine.check_invariants();
}

TEST(CaptureDeferral, UsesNotedDuringARouteAreForgottenWhenTheBlockIsFreedAfterIt) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(512, kStreamA);
  h.engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);
  h.engine.record_stream(a, kStreamB);
  h.engine.end_allocate_to_pool(kGraphPool);
  // Freed after the route: an ordinary cross-stream free, with its event.
  h.engine.free(a);
  EXPECT_EQ(h.device.live_events(), 1u);
  h.engine.check_invariants();  // no note left for a's Block
  h.device.complete_events();
  Block* b = h.engine.malloc(512, kStreamA);
  EXPECT_EQ(b->address, kBase);
  h.engine.free(b);
  h.engine.check_invariants();
}

TEST(CaptureDeferral, EmptyCacheDuringARouteLeavesDeferredFreesAndAfterItSyncsThem) {
  Harness h;
  h.device.hold_events(true);
  Block* a = h.engine.malloc(3 * kMiB, kStreamA);  // large: 20 MiB segment
  h.engine.record_stream(a, kStreamB);
  h.engine.create_or_incref_pool(kGraphPool);
  h.engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);
  h.engine.free(a);
  const int64_t syncs = h.stats().num_sync_all_streams;
  h.engine.empty_cache();  // default pools: skipped while routed, as native
  EXPECT_EQ(h.stats().num_sync_all_streams, syncs);
  EXPECT_EQ(h.device.live_events(), 0u);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.engine.empty_cache();  // records a's event, waits for it, releases
  EXPECT_EQ(h.stats().num_sync_all_streams, syncs + 1);
  EXPECT_TRUE(h.engine.segments().empty());
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_TRUE(h.engine.idle());
  h.engine.check_invariants();
}

}  // namespace
}  // namespace cachealloc::testing
