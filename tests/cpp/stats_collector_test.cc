// StatsCollector keeps counters its own way (pools only, peaks as
// headroom, freed derived). Against a DeviceStats updated the way native
// updates its stats (aggregate and pool Stat on every change): 200,000
// random events of every kind with random peak and accumulated resets must
// give the same 122 values.
#include <cstdint>
#include <iterator>
#include <random>

#include "gtest/gtest.h"
#include "stats/device_stats.h"

namespace cachealloc::testing {
namespace {

// DeviceStats driven as native drives its stats, for comparison.
struct Model {
  DeviceStats s;
  void up(StatArray& a, size_t pool, int64_t amt, bool inc) {
    for (size_t k : {size_t(kAllPools), pool}) inc ? a[k].increase(amt) : a[k].decrease(amt);
  }
  void apply(StatArray& a, size_t pool, int64_t c) {
    for (size_t k : {size_t(kAllPools), pool}) a[k].apply(c);
  }
  void on(const EngineEvent& e) {
    const size_t p = e.pool == PoolKind::kSmall ? kSmallPool : kLargePool;
    const int64_t size = e.size, req = e.requested;
    auto alloc = [&] {
      apply(s.inactive_split, p, e.split.blocks);
      apply(s.inactive_split_bytes, p, e.split.bytes);
      up(s.allocation, p, 1, true);
      up(s.allocated_bytes, p, size, true);
      up(s.active, p, 1, true);
      up(s.active_bytes, p, size, true);
      up(s.requested_bytes, p, req, true);
      if (e.oversize) s.oversize_allocations.increase(1);
    };
    auto freq = [&] {
      up(s.allocation, p, 1, false);
      up(s.allocated_bytes, p, size, false);
      if (e.oversize) s.oversize_allocations.decrease(1);
    };
    auto fcomp = [&] {
      apply(s.inactive_split, p, e.split.blocks);
      apply(s.inactive_split_bytes, p, e.split.bytes);
      up(s.active, p, 1, false);
      up(s.active_bytes, p, size, false);
      up(s.requested_bytes, p, req, false);
    };
    switch (e.kind) {
      case EventKind::kAlloc: alloc(); break;
      case EventKind::kFree: freq(); fcomp(); break;
      case EventKind::kFreeRequested: freq(); break;
      case EventKind::kFreeCompleted: fcomp(); break;
      case EventKind::kSegmentAlloc:
        up(s.segment, p, 1, true); up(s.reserved_bytes, p, size, true);
        if (e.oversize) s.oversize_segments.increase(1);
        ++s.num_device_alloc; break;
      case EventKind::kSegmentFree:
        ++s.num_device_free;
        up(s.segment, p, 1, false); up(s.reserved_bytes, p, size, false);
        if (e.oversize) s.oversize_segments.decrease(1);
        break;
      case EventKind::kSegmentMap:  // reserved bytes and device calls, not segments
        up(s.reserved_bytes, p, size, true); ++s.num_device_alloc; break;
      case EventKind::kSegmentUnmap:
        ++s.num_device_free; up(s.reserved_bytes, p, size, false); break;
      case EventKind::kOom: ++s.num_ooms; break;
      case EventKind::kAllocRetry: ++s.num_alloc_retries; break;
      case EventKind::kSyncAllStreams: ++s.num_sync_all_streams; break;
      case EventKind::kSnapshot:
      case EventKind::kUserDefined: break;  // never engine events
    }
  }
};

TEST(StatsCollector, MatchesNativeStyleDeviceStatsOnRandomEvents) {
  std::mt19937_64 rng(3);
  StatsCollector c(-1);
  Model m;
  m.s.max_split_size = -1;
  static constexpr EventKind kinds[] = {
      EventKind::kAlloc, EventKind::kFree, EventKind::kFreeRequested,
      EventKind::kFreeCompleted, EventKind::kSegmentAlloc,
      EventKind::kSegmentFree, EventKind::kSegmentMap, EventKind::kSegmentUnmap,
      EventKind::kOom, EventKind::kAllocRetry, EventKind::kSyncAllStreams};
  for (int step = 0; step < 200000; ++step) {
    const unsigned pick = rng() % 1000;
    if (pick == 0) { c.reset_peak(); m.s.reset_peak(); }
    else if (pick == 1) { c.reset_accumulated(); m.s.reset_accumulated(); }
    else {
      EngineEvent e(kinds[rng() % std::size(kinds)]);
      e.pool = rng() % 2 ? PoolKind::kSmall : PoolKind::kLarge;
      e.size = 512 * (rng() % 50);
      e.requested = e.size ? e.size - rng() % 512 : 0;
      e.oversize = rng() % 5 == 0;
      e.split.blocks = static_cast<int64_t>(rng() % 3) - 1;
      e.split.bytes = (static_cast<int64_t>(rng() % 3) - 1) * 512 * int64_t(rng() % 20);
      c.on_event(e);
      m.on(e);
    }
    if (step % 13 == 0) {
      auto a = c.stats().key_values(), b = m.s.key_values();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace cachealloc::testing
