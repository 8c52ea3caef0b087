// StatsCollector keeps counters its own way (pools only, peaks as
// headroom, freed derived). Against native's counters, written out here
// from c10's Stat and updated the way native updates them (aggregate and
// pool on every change; none of our counter code): 200,000 random events of
// every kind with random peak and accumulated resets must give the same
// 122 values.
#include <array>
#include <cstdint>
#include <iterator>
#include <random>

#include "gtest/gtest.h"
#include "stats/device_stats.h"

namespace cachealloc::testing {
namespace {

// Native's c10 Stat (CachingDeviceAllocator.h), written out here rather
// than reusing our Stat, so that the reference shares no counter code with
// the collector under test.
struct NativeStat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  // update_stat's sign rule: a positive change increases, a negative one
  // decreases, zero does nothing.
  void apply(int64_t change) {
    if (change > 0) increase(change);
    else if (change < 0) decrease(-change);
  }
};
using NativeArray = std::array<NativeStat, 3>;  // aggregate, small, large

// Native's DeviceStats, driven as native drives it, for comparison.
struct Model {
  NativeArray allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes,
      active_bytes, inactive_split_bytes, requested_bytes;
  NativeStat oversize_allocations, oversize_segments;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_sync_all_streams = 0, num_device_alloc = 0,
          num_device_free = 0;

  std::array<NativeArray*, 9> families() {
    return {&allocation, &segment, &active, &inactive_split, &allocated_bytes, &reserved_bytes,
            &active_bytes, &inactive_split_bytes, &requested_bytes};
  }
  // native: resetPeakStats.
  void reset_peak() {
    for (NativeArray* a : families())
      for (NativeStat& st : *a) st.peak = st.current;
    oversize_allocations.peak = oversize_allocations.current;
    oversize_segments.peak = oversize_segments.current;
  }
  // native: resetAccumulatedStats.
  void reset_accumulated() {
    for (NativeArray* a : families())
      for (NativeStat& st : *a) st.allocated = st.freed = 0;
    for (NativeStat* st : {&oversize_allocations, &oversize_segments}) st->allocated = st->freed = 0;
    num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
  }
  // The model's values in DeviceStats' layout, only to name them
  // (key_values) for the comparison.
  DeviceStats as_device_stats() const {
    DeviceStats d;
    auto copy = [](const NativeStat& from, Stat& to) {
      to.current = from.current;
      to.peak = from.peak;
      to.allocated = from.allocated;
      to.freed = from.freed;
    };
    auto copy_array = [&](const NativeArray& from, StatArray& to) {
      for (size_t k = 0; k < 3; ++k) copy(from[k], to[k]);
    };
    copy_array(allocation, d.allocation);
    copy_array(segment, d.segment);
    copy_array(active, d.active);
    copy_array(inactive_split, d.inactive_split);
    copy_array(allocated_bytes, d.allocated_bytes);
    copy_array(reserved_bytes, d.reserved_bytes);
    copy_array(active_bytes, d.active_bytes);
    copy_array(inactive_split_bytes, d.inactive_split_bytes);
    copy_array(requested_bytes, d.requested_bytes);
    copy(oversize_allocations, d.oversize_allocations);
    copy(oversize_segments, d.oversize_segments);
    d.num_alloc_retries = num_alloc_retries;
    d.num_ooms = num_ooms;
    d.num_sync_all_streams = num_sync_all_streams;
    d.num_device_alloc = num_device_alloc;
    d.num_device_free = num_device_free;
    d.max_split_size = -1;
    return d;
  }

  void up(NativeArray& a, size_t pool, int64_t amt, bool inc) {
    for (size_t k : {size_t(kAllPools), pool}) inc ? a[k].increase(amt) : a[k].decrease(amt);
  }
  void apply(NativeArray& a, size_t pool, int64_t c) {
    for (size_t k : {size_t(kAllPools), pool}) a[k].apply(c);
  }
  void on(const EngineEvent& e) {
    const size_t p = e.pool == PoolKind::kSmall ? kSmallPool : kLargePool;
    const int64_t size = e.size, req = e.requested;
    auto alloc = [&] {
      apply(inactive_split, p, e.split.blocks);
      apply(inactive_split_bytes, p, e.split.bytes);
      up(allocation, p, 1, true);
      up(allocated_bytes, p, size, true);
      up(active, p, 1, true);
      up(active_bytes, p, size, true);
      up(requested_bytes, p, req, true);
      if (e.oversize) oversize_allocations.increase(1);
    };
    auto freq = [&] {
      up(allocation, p, 1, false);
      up(allocated_bytes, p, size, false);
      if (e.oversize) oversize_allocations.decrease(1);
    };
    auto fcomp = [&] {
      apply(inactive_split, p, e.split.blocks);
      apply(inactive_split_bytes, p, e.split.bytes);
      up(active, p, 1, false);
      up(active_bytes, p, size, false);
      up(requested_bytes, p, req, false);
    };
    switch (e.kind) {
      case EventKind::kAlloc: alloc(); break;
      case EventKind::kFree: freq(); fcomp(); break;
      case EventKind::kFreeRequested: freq(); break;
      case EventKind::kFreeCompleted: fcomp(); break;
      case EventKind::kSegmentAlloc:
        up(segment, p, 1, true); up(reserved_bytes, p, size, true);
        if (e.oversize) oversize_segments.increase(1);
        ++num_device_alloc; break;
      case EventKind::kSegmentFree:
        ++num_device_free;
        up(segment, p, 1, false); up(reserved_bytes, p, size, false);
        if (e.oversize) oversize_segments.decrease(1);
        break;
      case EventKind::kSegmentMap:  // reserved bytes and device calls, not segments
        up(reserved_bytes, p, size, true); ++num_device_alloc; break;
      case EventKind::kSegmentUnmap:
        ++num_device_free; up(reserved_bytes, p, size, false); break;
      case EventKind::kOom: ++num_ooms; break;
      case EventKind::kAllocRetry: ++num_alloc_retries; break;
      case EventKind::kSyncAllStreams: ++num_sync_all_streams; break;
      case EventKind::kSnapshot:
      case EventKind::kUserDefined: break;  // never engine events
    }
  }
};

TEST(StatsCollector, MatchesNativeStyleDeviceStatsOnRandomEvents) {
  std::mt19937_64 rng(3);
  StatsCollector c(-1);
  Model m;
  static constexpr EventKind kinds[] = {
      EventKind::kAlloc, EventKind::kFree, EventKind::kFreeRequested,
      EventKind::kFreeCompleted, EventKind::kSegmentAlloc,
      EventKind::kSegmentFree, EventKind::kSegmentMap, EventKind::kSegmentUnmap,
      EventKind::kOom, EventKind::kAllocRetry, EventKind::kSyncAllStreams};
  for (int step = 0; step < 200000; ++step) {
    const unsigned pick = rng() % 1000;
    if (pick == 0) { c.reset_peak(); m.reset_peak(); }
    else if (pick == 1) { c.reset_accumulated(); m.reset_accumulated(); }
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
      auto a = c.stats().key_values(), b = m.as_device_stats().key_values();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace cachealloc::testing
