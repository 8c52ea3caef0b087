#include "stats/device_stats.h"

#include <algorithm>

namespace cachealloc {
namespace {

// Applies fn to the aggregate and to the event's pool entry.
template <typename Fn>
inline void for_pool(StatArray& a, PoolKind pool, Fn fn) {
  fn(a[kAllPools]);
  fn(a[pool == PoolKind::kSmall ? kSmallPool : kLargePool]);
}

}  // namespace

void StatsCollector::on_event(const EngineEvent& e) {
  DeviceStats& s = stats_;
  const auto size = static_cast<int64_t>(e.size);
  switch (e.kind) {
    case EngineEventKind::kSegmentAlloc:
      for_pool(s.segment, e.pool, [](Stat& x) { x.increase(1); });
      for_pool(s.reserved_bytes, e.pool, [&](Stat& x) { x.increase(size); });
      if (e.oversize) s.oversize_segments.increase(1);
      ++s.num_device_alloc;
      break;
    case EngineEventKind::kSegmentFree:
      ++s.num_device_free;
      for_pool(s.segment, e.pool, [](Stat& x) { x.decrease(1); });
      for_pool(s.reserved_bytes, e.pool, [&](Stat& x) { x.decrease(size); });
      if (e.oversize) s.oversize_segments.decrease(1);
      break;
    case EngineEventKind::kAlloc: {
      const auto requested = static_cast<int64_t>(e.requested);
      for_pool(s.inactive_split, e.pool, [&](Stat& x) { x.apply(e.split.blocks); });
      for_pool(s.inactive_split_bytes, e.pool, [&](Stat& x) { x.apply(e.split.bytes); });
      for_pool(s.allocation, e.pool, [](Stat& x) { x.increase(1); });
      for_pool(s.allocated_bytes, e.pool, [&](Stat& x) { x.increase(size); });
      for_pool(s.active, e.pool, [](Stat& x) { x.increase(1); });
      for_pool(s.active_bytes, e.pool, [&](Stat& x) { x.increase(size); });
      for_pool(s.requested_bytes, e.pool, [&](Stat& x) { x.increase(requested); });
      if (e.oversize) s.oversize_allocations.increase(1);
      break;
    }
    case EngineEventKind::kFreeRequested:
      for_pool(s.allocation, e.pool, [](Stat& x) { x.decrease(1); });
      for_pool(s.allocated_bytes, e.pool, [&](Stat& x) { x.decrease(size); });
      if (e.oversize) s.oversize_allocations.decrease(1);
      break;
    case EngineEventKind::kFreeCompleted: {
      const auto requested = static_cast<int64_t>(e.requested);
      for_pool(s.inactive_split, e.pool, [&](Stat& x) { x.apply(e.split.blocks); });
      for_pool(s.inactive_split_bytes, e.pool, [&](Stat& x) { x.apply(e.split.bytes); });
      for_pool(s.active, e.pool, [](Stat& x) { x.decrease(1); });
      for_pool(s.active_bytes, e.pool, [&](Stat& x) { x.decrease(size); });
      for_pool(s.requested_bytes, e.pool, [&](Stat& x) { x.decrease(requested); });
      break;
    }
    case EngineEventKind::kOom:
      ++s.num_ooms;
      break;
    case EngineEventKind::kAllocRetry:
      ++s.num_alloc_retries;
      break;
    case EngineEventKind::kSyncAllStreams:
      ++s.num_sync_all_streams;
      break;
  }
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
