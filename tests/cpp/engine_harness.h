// Shared set-up for the engine tests: one DeviceCachingAllocator on a
// SimulatedDevice with a StatsCollector attached, plus readers that turn the
// segment list into plain numbers a test can compare with hand-worked ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/policy/policy_registry.h"
#include "allocator/sim/simulated_device.h"
#include "stats/device_stats.h"

namespace cachealloc::testing {

inline constexpr size_t kKiB = size_t{1} << 10;
inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kGiB = size_t{1} << 30;
// The simulated device's first segment lands here (first fit, 2 MiB aligned).
inline constexpr uintptr_t kBase = SimulatedDevice::kDefaultBase;

// Streams are opaque handles; distinct non-zero values keep them apart.
inline constexpr StreamId kStreamA = 0x100;
inline constexpr StreamId kStreamB = 0x200;

struct Harness {
  // `policy`: a placement policy by name (allocator/policy/policy_registry.h).
  explicit Harness(const std::string& conf = "", size_t capacity = 8 * kGiB,
                   const std::string& policy = "native")
      : config(AllocatorConfig::parse(conf)),
        device(capacity),
        engine(0, config, device, make_policy(policy)),
        collector(config.max_split_size_stat()) {
    engine.add_observer(&collector);
  }
  ~Harness() { engine.remove_observer(&collector); }

  DeviceStats stats() const { return collector.stats(); }
  // Current value of a stat family for one pool (kAllPools, kSmallPool, kLargePool).
  static int64_t now(const StatArray& a, StatPool pool = kAllPools) { return a[pool].current; }

  AllocatorConfig config;
  SimulatedDevice device;
  DeviceCachingAllocator engine;
  StatsCollector collector;
};

// One block as (offset from kBase, bytes, allocated, free). Not allocated
// and not free is native's "active_pending_free": waiting on stream events.
using BlockShape = std::tuple<uintptr_t, size_t, bool, bool>;
using Segments = std::vector<std::vector<BlockShape>>;  // one list per segment
inline constexpr bool kAlloc = true, kNotAlloc = false, kFree = true, kBusy = false;

// Every segment's blocks in address order, as shapes.
inline Segments Layout(const DeviceCachingAllocator& e) {
  Segments out;
  for (const SegmentView& s : e.segments()) {
    std::vector<BlockShape> blocks;
    for (const Block* b : s.blocks)
      blocks.emplace_back(b->address - kBase, b->size, b->allocated, b->is_free());
    out.push_back(std::move(blocks));
  }
  return out;
}

}  // namespace cachealloc::testing
