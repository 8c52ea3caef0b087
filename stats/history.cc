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
  full_ = ring_.size() == max_entries_;
  keep_context_ = keep_context;
  enabled_ = true;
}

void HistoryRecorder::disable() {
  enabled_ = false;
  full_ = false;
  ring_.clear();
  next_ = 0;
}

void HistoryRecorder::store(TraceEntry entry) {
  if (!enabled_) return;
  if (!keep_context_) entry.context.reset();
  next_slot() = std::move(entry);
}

TraceEntry& HistoryRecorder::grow_slot() {
  TraceEntry& slot = ring_.emplace_back();
  full_ = ring_.size() == max_entries_;
  return slot;
}

void HistoryRecorder::on_event(const EngineEvent& e) {
  if (!enabled_) return;
  TraceAction action = TraceAction::kAlloc;
  bool block_event = true;  // size is the caller's request, not the block's
  switch (e.kind) {
    case EngineEventKind::kSegmentAlloc: action = TraceAction::kSegmentAlloc, block_event = false; break;
    case EngineEventKind::kSegmentFree: action = TraceAction::kSegmentFree, block_event = false; break;
    case EngineEventKind::kAlloc: action = TraceAction::kAlloc; break;
    case EngineEventKind::kFreeRequested: action = TraceAction::kFreeRequested; break;
    case EngineEventKind::kFreeCompleted: action = TraceAction::kFreeCompleted; break;
    case EngineEventKind::kFree: action = TraceAction::kFreeRequested; break;  // + completed
    case EngineEventKind::kOom: action = TraceAction::kOom, block_event = false; break;
    case EngineEventKind::kAllocRetry:
    case EngineEventKind::kSyncAllStreams:
      return;  // counted in stats, not traced (as native)
  }
  // Written into the ring slot in place: no temporary entry to move, and the
  // dropped entry's context is released by the assignment.
  // Null when no frames are kept or the call had none (the common case with
  // context=None: the slot's old frames, if any, are just released).
  const ContextPtr* context = keep_context_ && e.context && *e.context ? e.context : nullptr;
  const size_t size = block_event ? e.requested : e.size;
  auto write = [&](TraceAction a, int64_t time) {
    TraceEntry& t = next_slot();
    t.action = a;
    t.device = e.device;
    t.address = e.address;
    t.size = size;
    t.stream = e.stream;
    t.time_us = time;
    if (context) t.context = *context;
    else if (t.context) t.context.reset();
  };
  const int64_t time = now();
  write(action, time);
  // kFree is native's two entries: requested, then completed. Native reads
  // the clock for each; here the completed entry reuses the requested one's
  // ticks (the two are written back to back, well under the microsecond
  // the entries are resolved to), which saves a TSC read (~8-10 ns) per
  // free. A set Clock is still read per entry: the replay's clock hands out
  // one recorded time per entry.
  if (e.kind == EngineEventKind::kFree) write(TraceAction::kFreeCompleted, clock_ ? now() : time);
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
