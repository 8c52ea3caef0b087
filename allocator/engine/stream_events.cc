// StreamEvents (stream_events.h): the free markers of a capture and the
// part's invariant check. The engine drives it from
// device_allocator_streams.cc.
#include "allocator/engine/stream_events.h"

#include <algorithm>
#include <vector>

#include "allocator/base/errors.h"

namespace cachealloc {

void StreamEvents::check(absl::flat_hash_set<const Block*>& waiting,
                         const absl::flat_hash_set<const Block*>& busy) const {
  // Deferred frees (defer): exactly the freed blocks that hold stream uses
  // but no events, each listed once.
  for (const auto& [b, markers] : deferred_)
    if (waiting.erase(b) != 1)
      block_invariant_broken("deferred free is not a freed block without events", b);
  if (!waiting.empty())
    block_invariant_broken("freed block with stream uses has no events", *waiting.begin());
  for (const auto& [b, streams] : route_uses_)
    if (!busy.contains(b) || streams.empty())
      throw InvariantViolation("stream uses noted during a route for a block not in use");
}

std::vector<uint64_t> StreamEvents::free_markers(const Block* block) {
  std::vector<uint64_t> markers;
  // The block is already freed when this runs: a failed query (a stream
  // destroyed since its use, say) must not lose it. It waits for the
  // capture to end instead, as when a stream is not capturing.
  try {
    if (!backend_.capture_dependencies(device_, block->stream, markers)) return {};
    for (StreamId s : block->stream_uses)
      if (!backend_.capture_dependencies(device_, s, markers)) return {};
  } catch (const BackendError&) {
    return {};
  }
  // A node may be a dependency of several of the streams: keep it once.
  std::sort(markers.begin(), markers.end());
  markers.erase(std::unique(markers.begin(), markers.end()), markers.end());
  return markers;
}

}  // namespace cachealloc
