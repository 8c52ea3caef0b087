#include "stats/device_stats.h"

#include <algorithm>

namespace cachealloc {
StatsCollector::StatsCollector(int64_t max_split_size_stat) {
  scalars_.max_split_size = max_split_size_stat;
}

void StatsCollector::on_event(const EngineEvent& e) {
  const auto size = static_cast<int64_t>(e.size);
  const PoolKind p = e.pool;
  Family* const f = families_;
  switch (e.kind) {
    case EngineEventKind::kSegmentAlloc:
      f[kSegment].increase(p, 1);
      f[kReservedBytes].increase(p, size);
      if (e.oversize) scalars_.oversize_segments.increase(1);
      ++scalars_.num_device_alloc;
      break;
    case EngineEventKind::kSegmentFree:
      ++scalars_.num_device_free;
      f[kSegment].decrease(p, 1);
      f[kReservedBytes].decrease(p, size);
      if (e.oversize) scalars_.oversize_segments.decrease(1);
      break;
    case EngineEventKind::kAlloc: {
      // Native's order; each family is independent, so only the per-family
      // order of changes matters for peaks, and each family changes once.
      f[kInactiveSplit].apply(p, e.split.blocks);
      f[kInactiveSplitBytes].apply(p, e.split.bytes);
      f[kAllocation].increase(p, 1);
      f[kAllocatedBytes].increase(p, size);
      f[kActive].increase(p, 1);
      f[kActiveBytes].increase(p, size);
      f[kRequestedBytes].increase(p, static_cast<int64_t>(e.requested));
      if (e.oversize) scalars_.oversize_allocations.increase(1);
      break;
    }
    case EngineEventKind::kFreeRequested:
    case EngineEventKind::kFree:
      f[kAllocation].decrease(p, 1);
      f[kAllocatedBytes].decrease(p, size);
      if (e.oversize) scalars_.oversize_allocations.decrease(1);
      if (e.kind == EngineEventKind::kFreeRequested) break;
      [[fallthrough]];  // kFree: the block is back in the cache too
    case EngineEventKind::kFreeCompleted:
      f[kInactiveSplit].apply(p, e.split.blocks);
      f[kInactiveSplitBytes].apply(p, e.split.bytes);
      f[kActive].decrease(p, 1);
      f[kActiveBytes].decrease(p, size);
      f[kRequestedBytes].decrease(p, static_cast<int64_t>(e.requested));
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

void StatsCollector::Family::reset_peak() {
  for (PoolCounter& c : pool) c.peak = c.current;
  all_peak = pool[0].current + pool[1].current;
}

void StatsCollector::Family::reset_accumulated() {
  for (PoolCounter& c : pool) {
    c.allocated = 0;
    c.base = c.current;
  }
}

StatArray StatsCollector::Family::materialize() const {
  auto one = [](const PoolCounter& c) {
    Stat s;
    s.current = c.current;
    s.peak = c.peak;
    s.allocated = c.allocated;
    s.freed = c.allocated - (c.current - c.base);
    return s;
  };
  StatArray out;
  const Stat large = one(pool[static_cast<size_t>(PoolKind::kLarge)]);
  const Stat small = one(pool[static_cast<size_t>(PoolKind::kSmall)]);
  out[kLargePool] = large;
  out[kSmallPool] = small;
  out[kAllPools].current = large.current + small.current;
  out[kAllPools].peak = all_peak;
  out[kAllPools].allocated = large.allocated + small.allocated;
  out[kAllPools].freed = large.freed + small.freed;
  return out;
}

DeviceStats StatsCollector::stats() const {
  DeviceStats s = scalars_;
  s.allocation = families_[kAllocation].materialize();
  s.segment = families_[kSegment].materialize();
  s.active = families_[kActive].materialize();
  s.inactive_split = families_[kInactiveSplit].materialize();
  s.allocated_bytes = families_[kAllocatedBytes].materialize();
  s.reserved_bytes = families_[kReservedBytes].materialize();
  s.active_bytes = families_[kActiveBytes].materialize();
  s.inactive_split_bytes = families_[kInactiveSplitBytes].materialize();
  s.requested_bytes = families_[kRequestedBytes].materialize();
  return s;
}

void StatsCollector::reset_peak() {
  for (Family& f : families_) f.reset_peak();
  scalars_.reset_peak();
}

void StatsCollector::reset_accumulated() {
  for (Family& f : families_) f.reset_accumulated();
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
