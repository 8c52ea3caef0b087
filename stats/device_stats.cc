#include "stats/device_stats.h"

#include <algorithm>

namespace cachealloc {
StatsCollector::StatsCollector(int64_t max_split_size_stat) {
  scalars_.max_split_size = max_split_size_stat;
}

void StatsCollector::on_event(const EngineEvent& e) {
  // Read before any counter changes: the compiler cannot tell that the
  // event and the counters never overlap.
  const auto size = static_cast<int64_t>(e.size);
  const auto requested = static_cast<int64_t>(e.requested);
  const InactiveSplitChange split = e.split;
  const bool oversize = e.oversize;
  const auto p = static_cast<size_t>(e.pool);
  PoolUpdate u{pools_[p], all_room_};
  // Native's updates for each step. Within a step, each family changes at
  // most once, so only the order of steps matters (for peaks).
  auto alloc = [&] {
    u.apply(kInactiveSplit, split.blocks);
    u.apply(kInactiveSplitBytes, split.bytes);
    u.increase(kAllocation, 1);
    u.increase(kAllocatedBytes, size);
    u.increase(kActive, 1);
    u.increase(kActiveBytes, size);
    u.increase(kRequestedBytes, requested);
    if (oversize) scalars_.oversize_allocations.increase(1);
  };
  auto free_requested = [&] {
    u.decrease(kAllocation, 1);
    u.decrease(kAllocatedBytes, size);
    if (oversize) scalars_.oversize_allocations.decrease(1);
  };
  auto free_completed = [&] {
    u.apply(kInactiveSplit, split.blocks);
    u.apply(kInactiveSplitBytes, split.bytes);
    u.decrease(kActive, 1);
    u.decrease(kActiveBytes, size);
    u.decrease(kRequestedBytes, requested);
  };
  // The two kinds of a cache-hit pair are tested first, one compare each;
  // a switch over all kinds is an indirect jump through a table.
  if (e.kind == EngineEventKind::kAlloc) [[likely]] {
    alloc();
    return;
  }
  if (e.kind == EngineEventKind::kFree) [[likely]] {
    free_requested();  // native's two steps, back to back
    free_completed();
    return;
  }
  switch (e.kind) {
    case EngineEventKind::kSegmentAlloc:
      u.increase(kSegment, 1);
      u.increase(kReservedBytes, size);
      if (oversize) scalars_.oversize_segments.increase(1);
      ++scalars_.num_device_alloc;
      break;
    case EngineEventKind::kSegmentFree:
      ++scalars_.num_device_free;
      u.decrease(kSegment, 1);
      u.decrease(kReservedBytes, size);
      if (oversize) scalars_.oversize_segments.decrease(1);
      break;
    case EngineEventKind::kSegmentMap:  // native: map_block
      u.increase(kReservedBytes, size);
      ++scalars_.num_device_alloc;
      break;
    case EngineEventKind::kSegmentUnmap:  // native: unmap_block
      u.decrease(kReservedBytes, size);
      ++scalars_.num_device_free;
      break;
    case EngineEventKind::kAlloc:
    case EngineEventKind::kFree:
      break;  // above
    case EngineEventKind::kFreeRequested:
      free_requested();
      break;
    case EngineEventKind::kFreeCompleted:
      free_completed();
      break;
    case EngineEventKind::kOom:
      ++scalars_.num_ooms;
      break;
    case EngineEventKind::kAllocRetry:
      ++scalars_.num_alloc_retries;
      break;
    case EngineEventKind::kSyncAllStreams:
      ++scalars_.num_sync_all_streams;
      break;
  }
}

StatArray StatsCollector::materialize(FamilyIndex f) const {
  auto one = [f](const PoolCounters& c) {
    Stat s;
    s.current = c.current[f];
    s.peak = c.current[f] + c.room[f];
    s.allocated = c.allocated[f];
    s.freed = c.allocated[f] - (c.current[f] - c.base[f]);
    return s;
  };
  StatArray out;
  const Stat large = one(pools_[static_cast<size_t>(PoolKind::kLarge)]);
  const Stat small = one(pools_[static_cast<size_t>(PoolKind::kSmall)]);
  out[kLargePool] = large;
  out[kSmallPool] = small;
  out[kAllPools].current = large.current + small.current;
  out[kAllPools].peak = large.current + small.current + all_room_[f];
  out[kAllPools].allocated = large.allocated + small.allocated;
  out[kAllPools].freed = large.freed + small.freed;
  return out;
}

DeviceStats StatsCollector::stats() const {
  DeviceStats s = scalars_;
  s.allocation = materialize(kAllocation);
  s.segment = materialize(kSegment);
  s.active = materialize(kActive);
  s.inactive_split = materialize(kInactiveSplit);
  s.allocated_bytes = materialize(kAllocatedBytes);
  s.reserved_bytes = materialize(kReservedBytes);
  s.active_bytes = materialize(kActiveBytes);
  s.inactive_split_bytes = materialize(kInactiveSplitBytes);
  s.requested_bytes = materialize(kRequestedBytes);
  return s;
}

void StatsCollector::reset_peak() {
  for (PoolCounters& pool : pools_) pool.room.fill(0);
  all_room_.fill(0);
  scalars_.reset_peak();
}

void StatsCollector::reset_accumulated() {
  for (PoolCounters& pool : pools_) {
    pool.allocated.fill(0);
    pool.base = pool.current;
  }
  scalars_.reset_accumulated();
}

void DeviceStats::reset_peak() {
  for (StatArray* a : {&allocation, &segment, &active, &inactive_split, &allocated_bytes,
                       &reserved_bytes, &active_bytes, &inactive_split_bytes,
                       &requested_bytes})
    for (Stat& s : *a) s.reset_peak();
  oversize_allocations.reset_peak();
  oversize_segments.reset_peak();
}

void DeviceStats::reset_accumulated() {
  for (StatArray* a : {&allocation, &segment, &active, &inactive_split, &allocated_bytes,
                       &reserved_bytes, &active_bytes, &inactive_split_bytes,
                       &requested_bytes})
    for (Stat& s : *a) s.reset_accumulated();
  oversize_allocations.reset_accumulated();
  oversize_segments.reset_accumulated();
  num_alloc_retries = 0;
  num_ooms = 0;
  num_sync_all_streams = 0;
  num_device_alloc = 0;
  num_device_free = 0;
}

std::vector<std::pair<std::string, int64_t>> DeviceStats::key_values() const {
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(122);
  auto add_stat = [&](const std::string& prefix, const Stat& s) {
    out.emplace_back(prefix + ".allocated", s.allocated);
    out.emplace_back(prefix + ".current", s.current);
    out.emplace_back(prefix + ".freed", s.freed);
    out.emplace_back(prefix + ".peak", s.peak);
  };
  const std::pair<const char*, const StatArray*> families[] = {
      {"active", &active},
      {"active_bytes", &active_bytes},
      {"allocated_bytes", &allocated_bytes},
      {"allocation", &allocation},
      {"inactive_split", &inactive_split},
      {"inactive_split_bytes", &inactive_split_bytes},
      {"requested_bytes", &requested_bytes},
      {"reserved_bytes", &reserved_bytes},
      {"segment", &segment},
  };
  for (const auto& [name, a] : families) {
    add_stat(std::string(name) + ".all", (*a)[kAllPools]);
    add_stat(std::string(name) + ".large_pool", (*a)[kLargePool]);
    add_stat(std::string(name) + ".small_pool", (*a)[kSmallPool]);
  }
  out.emplace_back("max_split_size", max_split_size);
  out.emplace_back("num_alloc_retries", num_alloc_retries);
  out.emplace_back("num_device_alloc", num_device_alloc);
  out.emplace_back("num_device_free", num_device_free);
  out.emplace_back("num_ooms", num_ooms);
  out.emplace_back("num_sync_all_streams", num_sync_all_streams);
  add_stat("oversize_allocations", oversize_allocations);
  add_stat("oversize_segments", oversize_segments);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cachealloc
