// The counters behind torch.cuda.memory_stats(): all 122 keys of torch 2.11,
// kept by watching the engine's events (stats never steer the engine).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "allocator/engine/observe/engine_observer.h"
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
//
// The counters are kept in a cheaper form than DeviceStats and turned into
// one on request, because on_event runs on every allocate and free (2 events
// per pair) and DeviceStats updates three Stats (aggregate and pool) of four
// fields for every change. Here, per family:
//   - only the two pools' current and allocated are counted; the
//     aggregate's current and allocated are their sums (native updates the
//     aggregate together with the pool on every change, so the sums are
//     exact);
//   - freed is not counted: freed == allocated - (current - base), where
//     base is current at the last accumulated reset;
//   - a peak is kept as its headroom, room == peak - current >= 0, for each
//     pool and for the aggregate. An increase by a > 0 makes it
//     max(room - a, 0) (a new peak when it would go negative), a decrease
//     by a adds a. So neither side needs current to be read: an increase
//     is four read-modify-write instructions (current, allocated, two
//     rooms) and two sign branches, a decrease three.
//
// Layout: counters grouped by pool, then field, then family. An event
// changes one pool's families, so on_event finds that pool's counters once,
// and each change is a fixed offset from there.
class StatsCollector : public EngineObserver {
 public:
  explicit StatsCollector(int64_t max_split_size_stat);
  void on_event(const EngineEvent& e) override;
  // Every counter, as memory_stats reports it. O(1) (a few hundred bytes).
  DeviceStats stats() const;
  // allocated_bytes.all.current and reserved_bytes.all.current alone, as
  // stats() gives them, without building the rest (a profiler's numbers at
  // every allocation and free). O(1), a few loads.
  int64_t allocated_bytes_current() const { return current_all(kAllocatedBytes); }
  int64_t reserved_bytes_current() const { return current_all(kReservedBytes); }
  // As DeviceStats::reset_peak / reset_accumulated.
  void reset_peak();
  void reset_accumulated();

 private:
  // The families, in DeviceStats order.
  enum FamilyIndex : size_t {
    kAllocation, kSegment, kActive, kInactiveSplit, kAllocatedBytes, kReservedBytes,
    kActiveBytes, kInactiveSplitBytes, kRequestedBytes, kFamilyCount
  };
  // One pool's counters, each indexed by family. Field by field rather than
  // a struct per family: the compiler would pair a family's neighbouring
  // fields into vector operations (current += a next to room -= a), which
  // cost more instructions than the scalar updates.
  struct PoolCounters {
    std::array<int64_t, kFamilyCount> current{};
    std::array<int64_t, kFamilyCount> room{};       // peak - current
    std::array<int64_t, kFamilyCount> allocated{};  // added since the last accumulated reset
    std::array<int64_t, kFamilyCount> base{};       // current at the last accumulated reset
  };

  int64_t current_all(FamilyIndex f) const {
    return pools_[0].current[f] + pools_[1].current[f];
  }

  // The changes one event makes to its pool's counters (`mine`) and to the
  // aggregate's headroom (`all_room`).
  struct PoolUpdate {
    PoolCounters& mine;
    std::array<int64_t, kFamilyCount>& all_room;

    // Precondition: amount >= 0.
    void increase(FamilyIndex f, int64_t amount) {
      mine.current[f] += amount;
      mine.allocated[f] += amount;
      if ((mine.room[f] -= amount) < 0) [[unlikely]] new_peak(mine.room[f]);
      if ((all_room[f] -= amount) < 0) [[unlikely]] new_peak(all_room[f]);
    }
    // A new peak leaves no headroom. The empty asm keeps this a branch that
    // is not taken in steady state: without it the compiler turns the clamp
    // into a conditional move, a reload and a store on every increase (3
    // more instructions each).
    static void new_peak(int64_t& room) {
      asm volatile("");
      room = 0;
    }
    void decrease(FamilyIndex f, int64_t amount) {
      mine.current[f] -= amount;
      mine.room[f] += amount;
      all_room[f] += amount;
    }
    // Native's signed form: > 0 increases, < 0 decreases, 0 does nothing.
    void apply(FamilyIndex f, int64_t change) {
      if (change > 0) increase(f, change);
      else if (change < 0) decrease(f, -change);
    }
  };
  StatArray materialize(FamilyIndex f) const;

  PoolCounters pools_[2];  // indexed by PoolKind
  // The aggregate's peak headroom: its peak minus the pools' summed current.
  std::array<int64_t, kFamilyCount> all_room_{};
  // Everything without pools (oversize stats, counters, max_split_size):
  // rarely updated, kept as DeviceStats keeps them; the pooled families of
  // this copy are unused.
  DeviceStats scalars_;
};

}  // namespace cachealloc
