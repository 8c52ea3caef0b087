// The counters behind torch.cuda.memory_stats(): all 122 keys of torch 2.11,
// kept by watching the engine's events (stats never steer the engine).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "allocator/engine_observer.h"
#include "stats/stat.h"

namespace cachealloc {

// Index into each family: the aggregate and the two pools.
enum StatPool : size_t { kAllPools = 0, kSmallPool = 1, kLargePool = 2 };
using StatArray = std::array<Stat, 3>;

struct DeviceStats {
  StatArray allocation;            // blocks handed out (count)
  StatArray segment;               // segments reserved (count)
  StatArray active;                // allocated or awaiting stream events (count)
  StatArray inactive_split;        // free pieces of split segments (count)
  StatArray allocated_bytes;       // bytes handed out (block sizes)
  StatArray reserved_bytes;        // bytes reserved from the device
  StatArray active_bytes;          // bytes of active blocks
  StatArray inactive_split_bytes;  // bytes of inactive split pieces
  StatArray requested_bytes;       // bytes callers asked for (unrounded)
  Stat oversize_allocations;       // handed-out blocks >= max_split_size
  Stat oversize_segments;          // segments >= max_split_size
  int64_t num_alloc_retries = 0;   // device asked again after emptying cache
  int64_t num_ooms = 0;            // OutOfMemoryErrors raised
  int64_t num_sync_all_streams = 0;  // full event synchronizations
  int64_t num_device_alloc = 0;    // segments reserved from the device
  int64_t num_device_free = 0;     // segments returned to the device
  int64_t max_split_size = -1;     // config value; -1 = unlimited

  void reset_peak();
  void reset_accumulated();
  // All 122 (key, value) pairs, keys sorted as torch.cuda.memory_stats
  // returns them ("active.all.allocated", ...).
  std::vector<std::pair<std::string, int64_t>> key_values() const;
};

// An EngineObserver that keeps DeviceStats. Called under the engine's lock;
// read stats() under the same lock.
class StatsCollector : public EngineObserver {
 public:
  explicit StatsCollector(int64_t max_split_size_stat) {
    stats_.max_split_size = max_split_size_stat;
  }
  void on_event(const EngineEvent& e) override;
  const DeviceStats& stats() const { return stats_; }
  DeviceStats& stats() { return stats_; }

 private:
  DeviceStats stats_;
};

}  // namespace cachealloc
