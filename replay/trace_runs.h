// How a recorded device trace groups into requests and their side effects.
//
// A trace is a sequence of runs: side effects (segment_alloc, segment_free,
// segment_map, segment_unmap, free_completed of a delayed free), then one request (alloc, oom, or
// free_requested, which may be followed by its own free_completed). A run of
// segment frees that leads the side effects and that the request cannot
// explain is an empty_cache() call.
//
// Shared by the lockstep replayer (replayer.cc) and the request-stream
// extraction (request_stream.cc) so that both read a trace the same way;
// they differ only in how they decide whether a request could have released
// memory itself (the replayer asks its engine, the extraction the trace).
#pragma once

#include <cstddef>
#include <vector>

#include "replay/trace.h"

namespace cachealloc {

// Whether events[k] is a free_requested directly followed by its own
// free_completed (a free recorded as completed at once).
inline bool completes_at_once(const std::vector<RecordedEvent>& events, size_t k) {
  return events[k].action == RecordedAction::kFreeRequested && k + 1 < events.size() &&
         events[k + 1].action == RecordedAction::kFreeCompleted &&
         events[k + 1].address == events[k].address;
}

// Whether events[k] gives memory back to the device: a segment_free, or an
// expandable segment's segment_unmap.
inline bool is_segment_release(const RecordedEvent& e) {
  return e.action == RecordedAction::kSegmentFree || e.action == RecordedAction::kSegmentUnmap;
}

// Whether events[k] is a side effect rather than a request: a segment event,
// or a free_completed that does not directly follow its free_requested (a
// delayed free, completed when its stream event finished).
inline bool is_side_effect(const std::vector<RecordedEvent>& events, size_t k) {
  const RecordedEvent& e = events[k];
  if (e.action == RecordedAction::kSegmentAlloc || e.action == RecordedAction::kSegmentFree ||
      e.action == RecordedAction::kSegmentMap || e.action == RecordedAction::kSegmentUnmap)
    return true;
  return e.action == RecordedAction::kFreeCompleted && !(k > 0 && completes_at_once(events, k - 1));
}

// End of the side-effect run that starts at `first`: the index of the next
// request, or events.size().
inline size_t side_effects_end(const std::vector<RecordedEvent>& events, size_t first) {
  size_t j = first;
  while (j < events.size() && is_side_effect(events, j)) ++j;
  return j;
}

// The leading part of the side effects [first, end) made only of segment
// frees or unmaps and delayed free completions (what empty_cache() emits). Returns its
// end; *has_segment_free says whether it holds at least one segment_free or
// segment_unmap
// (without one it cannot be an empty_cache() that left a trace).
inline size_t leading_release_run(const std::vector<RecordedEvent>& events, size_t first,
                                  size_t end, bool* has_segment_free) {
  size_t lead = first;
  bool segment_free = false;
  while (lead < end && (is_segment_release(events[lead]) ||
                        events[lead].action == RecordedAction::kFreeCompleted)) {
    segment_free |= is_segment_release(events[lead]);
    ++lead;
  }
  *has_segment_free = segment_free;
  return lead;
}

}  // namespace cachealloc
