// What a lockstep replay is asked to do (ReplayOptions) and what it found
// (ReplayResult, with the first Divergence). A header of its own so that
// the driver (replayer.h) and one device's replay (lockstep_replay.h) share
// these types without including each other.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "pickle/py_value.h"
#include "stats/device_stats.h"

namespace cachealloc {

class DeviceCachingAllocator;

struct ReplayOptions {
  std::optional<AllocatorConfig> config;  // default: the trace's settings
  std::optional<size_t> memory_limit;     // allowed bytes per device
  size_t device_memory = 85017493504;     // simulated capacity (H100 80GB)
  bool build_snapshot = false;            // keep history, return a snapshot
  bool check_invariants = false;          // engine and device, after every request (slow)
  bool check_final_segments = true;       // compare with the trace's segments
  // Called now and then with (events done, events total).
  std::function<void(size_t, size_t)> progress;
  // Called after each request that replayed in step, with the index (in
  // the device's recorded events) of the first event after it and the
  // engine: for tests that compare the engine's state with the recorded
  // run's at that point. Each replay of a device (replay_trace may replay
  // one again to settle an ambiguity) calls it from the device's start.
  std::function<void(size_t, const DeviceCachingAllocator&)> after_request;
};

// An event as compared: what the trace says, or what the engine did.
struct EventDescription {
  std::string action;
  size_t address = 0;  // device_free for oom (not compared)
  size_t size = 0;
  size_t stream = 0;
  std::string note;    // for "got": an exception message or "nothing"
};

struct Divergence {
  int device = 0;
  size_t index = 0;  // index into the device's recorded trace
  EventDescription expected;
  EventDescription got;
};

struct ReplayResult {
  size_t events = 0;                     // recorded entries replayed
  std::optional<Divergence> divergence;  // first mismatch, if any
  std::vector<DeviceStats> stats;        // per device, at the end
  size_t empty_cache_calls = 0;          // inferred from the trace
  double seconds = 0;                    // wall time of the replay loop
  std::optional<PyValue> snapshot;       // when build_snapshot
};

}  // namespace cachealloc
