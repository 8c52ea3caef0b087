// The glue's statistics (device_stats.h).
#include "bindings/torch/device_stats.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace cachealloc_torch {

DeviceStats device_stats(c10::DeviceIndex device) {
  const int n = cachealloc_stat_count();
  std::vector<int64_t> values(static_cast<size_t>(n));
  TORCH_CHECK(cachealloc_memory_stats(device, values.data(), n) == 0, cachealloc_last_error());
  std::unordered_map<std::string, int64_t> by_name;
  for (int i = 0; i < n; ++i) by_name[cachealloc_stat_name(i)] = values[static_cast<size_t>(i)];
  auto stat = [&](c10::CachingAllocator::Stat& s, const std::string& prefix) {
    s.current = by_name.at(prefix + ".current");
    s.peak = by_name.at(prefix + ".peak");
    s.allocated = by_name.at(prefix + ".allocated");
    s.freed = by_name.at(prefix + ".freed");
  };
  auto family = [&](c10::CachingAllocator::StatArray& a, const std::string& name) {
    // c10's StatType order: AGGREGATE, SMALL_POOL, LARGE_POOL.
    stat(a[0], name + ".all");
    stat(a[1], name + ".small_pool");
    stat(a[2], name + ".large_pool");
  };
  DeviceStats s;
  family(s.allocation, "allocation");
  family(s.segment, "segment");
  family(s.active, "active");
  family(s.inactive_split, "inactive_split");
  family(s.allocated_bytes, "allocated_bytes");
  family(s.reserved_bytes, "reserved_bytes");
  family(s.active_bytes, "active_bytes");
  family(s.inactive_split_bytes, "inactive_split_bytes");
  family(s.requested_bytes, "requested_bytes");
  stat(s.oversize_allocations, "oversize_allocations");
  stat(s.oversize_segments, "oversize_segments");
  s.num_alloc_retries = by_name.at("num_alloc_retries");
  s.num_ooms = by_name.at("num_ooms");
  s.num_sync_all_streams = by_name.at("num_sync_all_streams");
  s.num_device_alloc = by_name.at("num_device_alloc");
  s.num_device_free = by_name.at("num_device_free");
  s.max_split_size = by_name.at("max_split_size");
  return s;
}

}  // namespace cachealloc_torch
