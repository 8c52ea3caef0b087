#include "replay/engine_trace.h"

#include <optional>
#include <utility>

#include "stats/snapshot.h"

namespace cachealloc {
namespace {

std::optional<RecordedAction> recorded_action(TraceAction a) {
  switch (a) {
    case TraceAction::kSegmentAlloc: return RecordedAction::kSegmentAlloc;
    case TraceAction::kSegmentFree: return RecordedAction::kSegmentFree;
    case TraceAction::kAlloc: return RecordedAction::kAlloc;
    case TraceAction::kFreeRequested: return RecordedAction::kFreeRequested;
    case TraceAction::kFreeCompleted: return RecordedAction::kFreeCompleted;
    case TraceAction::kOom: return RecordedAction::kOom;
    case TraceAction::kSegmentMap: return RecordedAction::kSegmentMap;
    case TraceAction::kSegmentUnmap: return RecordedAction::kSegmentUnmap;
    case TraceAction::kSnapshot:
    case TraceAction::kUserDefined: break;  // no effect on the allocator
  }
  return std::nullopt;
}

}  // namespace

RecordedTrace trace_from_history(const std::vector<TraceEntry>& entries,
                                 const std::vector<SegmentView>& segments,
                                 const AllocatorConfig& config) {
  RecordedTrace trace;
  trace.config = config;
  trace.has_settings = true;
  std::vector<RecordedEvent>& events = trace.devices.emplace_back();
  events.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const TraceEntry& e = entries[i];
    const std::optional<RecordedAction> action = recorded_action(e.action);
    if (!action) {
      ++trace.skipped_entries;
      continue;
    }
    RecordedEvent r;
    r.action = *action;
    r.size = e.size;
    r.stream = e.stream;
    r.time_us = e.time_us;
    r.source_index = i;
    // An oom entry's address field holds the device's free bytes.
    if (e.action == TraceAction::kOom) r.device_free = e.address;
    else r.address = e.address;
    events.push_back(std::move(r));
  }
  for (const SegmentView& s : segments) {
    RecordedSegment seg;
    seg.address = s.address;
    seg.is_small = s.is_small;
    for (const Block* b : s.blocks) {
      seg.total_size += b->size;
      seg.blocks.emplace_back(b->size, block_state_name(*b));
    }
    trace.final_segments.push_back(std::move(seg));
    trace.final_segment_devices.push_back(0);
  }
  return trace;
}

}  // namespace cachealloc
