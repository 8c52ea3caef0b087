#include "allocator/base/event_kind.h"

namespace cachealloc {

const char* action_name(EventKind a) {
  switch (a) {
    case EventKind::kSegmentAlloc: return "segment_alloc";
    case EventKind::kSegmentFree: return "segment_free";
    case EventKind::kAlloc: return "alloc";
    case EventKind::kFreeRequested: return "free_requested";
    case EventKind::kFreeCompleted: return "free_completed";
    case EventKind::kOom: return "oom";
    case EventKind::kSnapshot: return "snapshot";
    case EventKind::kUserDefined: return "user_defined";
    case EventKind::kSegmentMap: return "segment_map";
    case EventKind::kSegmentUnmap: return "segment_unmap";
    case EventKind::kFree:
    case EventKind::kAllocRetry:
    case EventKind::kSyncAllStreams: break;  // never traced
  }
  return "unknown";
}

std::optional<EventKind> parse_action(std::string_view name) {
  for (auto a = EventKind::kSegmentAlloc; a <= EventKind::kUserDefined;
       a = static_cast<EventKind>(static_cast<unsigned>(a) + 1))
    if (name == action_name(a)) return a;
  return std::nullopt;
}

}  // namespace cachealloc
