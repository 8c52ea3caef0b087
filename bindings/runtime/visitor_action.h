// The action codes the C API's visitors use (cachealloc.h: the snapshot
// visitor's trace entries and the segment callback): native's TraceEntry
// action order, so framework glue indexes its own action table with them.
#pragma once

#include "allocator/base/event_kind.h"

namespace cachealloc {

// 0 segment_alloc, 1 segment_free, 2 alloc, 3 free_requested,
// 4 free_completed, 5 oom, 6 snapshot, 7 segment_map, 8 segment_unmap;
// -1 for events no visitor reports.
inline int visitor_action_code(EventKind a) {
  switch (a) {
    case EventKind::kSegmentAlloc: return 0;
    case EventKind::kSegmentFree: return 1;
    case EventKind::kAlloc: return 2;
    case EventKind::kFreeRequested: return 3;
    case EventKind::kFreeCompleted: return 4;
    case EventKind::kOom: return 5;
    case EventKind::kSnapshot: return 6;
    case EventKind::kSegmentMap: return 7;
    case EventKind::kSegmentUnmap: return 8;
    default: return -1;
  }
}

}  // namespace cachealloc
