// The topology of the CUDA graphs being captured, as
// graph_capture_record_stream_reuse needs it (native's free markers): a
// stream's current capture dependencies, and whether given nodes precede
// them. Graph nodes travel through the engine as opaque uint64_t ids.
//
// Ancestor sets are cached per stream for its current capture (native keeps
// the same per capture and stream): a capture only adds nodes after a
// stream's dependencies, so the nodes already found stay ancestors, and each
// query walks only what was captured since. A stream's entry is dropped once
// it is seen not capturing, or replaced when it captures into a new graph.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/base/device_backend.h"

namespace cachealloc {

class CaptureTopology {
 public:
  // DeviceBackend::capture_dependencies.
  bool dependencies(StreamId stream, std::vector<uint64_t>& out);
  // DeviceBackend::capture_follows.
  bool follows(StreamId stream, const std::vector<uint64_t>& nodes);

 private:
  struct Ancestors {
    unsigned long long capture_id = 0;
    // Nodes that are a dependency of the stream's capture or an ancestor of
    // one (as observed at the last query; grows with the capture). Invariant
    // between calls: every node's parents are in the set too.
    absl::flat_hash_set<uint64_t> nodes;
  };
  std::mutex mutex_;  // engines of several devices may share one backend
  absl::flat_hash_map<StreamId, Ancestors> ancestors_;
};

}  // namespace cachealloc
