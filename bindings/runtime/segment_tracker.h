// Hands an engine's segment events to one callback: what framework glue
// passes on to PyTorch's allocator trace trackers
// (attachAllocatorTraceTracker). ProcessGroupNCCL is the user that matters:
// once a MemPool is registered (register_mem_pool), its hook registers each
// new segment of that pool with NCCL at segment_alloc, and deregisters it at
// segment_free, matching the pool by the event's private pool id.
//
// Attached to an engine only while a callback is set (Runtime::
// set_segment_callback): idle, it costs nothing. Called under the device's
// lock, as native calls its trackers under its own: the callback must be
// quick and must not call back into cachealloc.
//
// Order against native: native records segment_free before the memory goes
// back; the engine reports it after (release_block: a source that fails
// leaves the segment cached and unreported). The callback therefore sees a
// segment_free once the memory is released.
#pragma once

#include <cstdint>

#include "allocator/engine/observe/engine_observer.h"
#include "bindings/runtime/visitor_action.h"

namespace cachealloc {

// action: 0 segment_alloc, 1 segment_free, 7 segment_map, 8 segment_unmap
// (the snapshot visitor's codes); address and bytes of the segment or of
// the pages mapped or unmapped; pool: the private pool's id ({0, 0}: the
// default pools).
using SegmentCallback = void (*)(void* user, int action, int device, uint64_t address,
                                 uint64_t bytes, void* stream, uint64_t pool_first,
                                 uint64_t pool_second);

class SegmentTracker final : public EngineObserver {
 public:
  SegmentTracker(int device, SegmentCallback fn, void* user)
      : device_(device), fn_(fn), user_(user) {}

  void on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentFree:
      case EventKind::kSegmentMap:
      case EventKind::kSegmentUnmap: break;
      default: return;  // segments only
    }
    fn_(user_, visitor_action_code(e.kind), device_, e.address, e.size, reinterpret_cast<void*>(e.stream),
        e.private_pool_first, e.private_pool_second);
  }

 private:
  const int device_;
  const SegmentCallback fn_;
  void* const user_;
};

}  // namespace cachealloc
