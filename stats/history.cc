#include "stats/history.h"

#include <chrono>

namespace cachealloc {

const char* action_name(TraceAction a) {
  switch (a) {
    case TraceAction::kSegmentAlloc: return "segment_alloc";
    case TraceAction::kSegmentFree: return "segment_free";
    case TraceAction::kAlloc: return "alloc";
    case TraceAction::kFreeRequested: return "free_requested";
    case TraceAction::kFreeCompleted: return "free_completed";
    case TraceAction::kOom: return "oom";
    case TraceAction::kSnapshot: return "snapshot";
    case TraceAction::kUserDefined: return "user_defined";
  }
  return "unknown";
}

int64_t HistoryRecorder::system_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void HistoryRecorder::enable(size_t max_entries, bool keep_context) {
  if (max_entries == 0) max_entries = 1;
  // Shrinking keeps the newest entries.
  if (max_entries < ring_.size()) {
    std::vector<TraceEntry> kept = ordered();
    kept.erase(kept.begin(), kept.end() - static_cast<ptrdiff_t>(max_entries));
    ring_ = std::move(kept);
    next_ = 0;
  } else if (next_ != 0) {
    ring_ = ordered();
    next_ = 0;
  }
  max_entries_ = max_entries;
  keep_context_ = keep_context;
  enabled_ = true;
}

void HistoryRecorder::disable() {
  enabled_ = false;
  ring_.clear();
  next_ = 0;
}

void HistoryRecorder::store(TraceEntry entry) {
  if (!enabled_) return;
  if (!keep_context_) entry.context.reset();
  if (ring_.size() < max_entries_) {
    ring_.push_back(std::move(entry));
  } else {
    ring_[next_] = std::move(entry);
    if (++next_ == max_entries_) next_ = 0;
  }
}

void HistoryRecorder::on_event(const EngineEvent& e) {
  if (!enabled_) return;
  TraceEntry t;
  switch (e.kind) {
    case EngineEventKind::kSegmentAlloc: t.action = TraceAction::kSegmentAlloc; break;
    case EngineEventKind::kSegmentFree: t.action = TraceAction::kSegmentFree; break;
    case EngineEventKind::kAlloc: t.action = TraceAction::kAlloc; break;
    case EngineEventKind::kFreeRequested: t.action = TraceAction::kFreeRequested; break;
    case EngineEventKind::kFreeCompleted: t.action = TraceAction::kFreeCompleted; break;
    case EngineEventKind::kFree: {
      // Native's two entries, in its order.
      EngineEvent half = e;
      half.kind = EngineEventKind::kFreeRequested;
      on_event(half);
      half.kind = EngineEventKind::kFreeCompleted;
      on_event(half);
      return;
    }
    case EngineEventKind::kOom: t.action = TraceAction::kOom; break;
    case EngineEventKind::kAllocRetry:
    case EngineEventKind::kSyncAllStreams:
      return;  // counted in stats, not traced (as native)
  }
  const bool block_event = t.action == TraceAction::kAlloc ||
                           t.action == TraceAction::kFreeRequested ||
                           t.action == TraceAction::kFreeCompleted;
  t.device = e.device;
  t.address = e.address;
  t.size = block_event ? e.requested : e.size;
  t.stream = e.stream;
  t.time_us = now();
  if (e.context) t.context = *e.context;
  store(std::move(t));
}

std::vector<TraceEntry> HistoryRecorder::ordered() const {
  std::vector<TraceEntry> out;
  out.reserve(ring_.size());
  out.insert(out.end(), ring_.begin() + static_cast<ptrdiff_t>(next_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<ptrdiff_t>(next_));
  return out;
}

std::vector<TraceEntry> HistoryRecorder::entries() const {
  std::vector<TraceEntry> out = ordered();
  if (!clock_) {
    const TraceClock::Converter c = ticks_clock_.converter();
    for (TraceEntry& t : out) t.time_us = c.unix_us(static_cast<uint64_t>(t.time_us));
  }
  return out;
}

}  // namespace cachealloc
