// The allocation history behind torch.cuda.memory._record_memory_history:
// a bounded ring of trace entries with native's action names and fields.
//
// When full, the oldest entry is dropped for each new one. Disabling clears
// the ring, as native does. Called under the engine's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "allocator/call_context.h"
#include "allocator/engine_observer.h"
#include "stats/trace_clock.h"

namespace cachealloc {

enum class TraceAction : uint8_t {
  kSegmentAlloc,
  kSegmentFree,
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kOom,
  kSnapshot,
  kUserDefined,
};
// Native's spelling: "segment_alloc", "alloc", "free_requested", ...
const char* action_name(TraceAction a);

struct TraceEntry {
  TraceAction action = TraceAction::kAlloc;
  int device = 0;
  // Block or segment address; for kOom the device's free bytes.
  uintptr_t address = 0;
  // Requested bytes (alloc/free entries), segment bytes (segment entries),
  // rounded request (kOom).
  size_t size = 0;
  StreamId stream = 0;
  // Microseconds since the Unix epoch (in entries() and everything built
  // from them; inside the ring, TraceClock ticks unless a Clock is set).
  int64_t time_us = 0;
  ContextPtr context;   // null unless contexts are recorded
};

class HistoryRecorder : public EngineObserver {
 public:
  // Microseconds since the Unix epoch; set one so replays can stamp entries
  // with recorded times. Without one (the default) entries are stamped with
  // TraceClock ticks, a few cycles each, and converted when read.
  using Clock = std::function<int64_t()>;
  static int64_t system_clock_us();

  explicit HistoryRecorder(Clock clock = nullptr) : clock_(std::move(clock)) {}

  // Starts (or keeps) recording with room for `max_entries` (>= 1); when
  // `keep_context` is false entries carry no frames (native's "state" level).
  void enable(size_t max_entries, bool keep_context);
  // Stops recording and drops what was recorded.
  void disable();
  bool enabled() const { return enabled_; }
  void set_clock(Clock clock) { clock_ = std::move(clock); }

  void on_event(const EngineEvent& e) override;
  // Adds an entry that did not come from the engine (snapshot, annotation),
  // stamped with the current time (entry.time_us is overwritten).
  void record(TraceEntry entry) {
    entry.time_us = now();
    store(std::move(entry));
  }
  // Records that a snapshot was taken, as native does after building one:
  // action "snapshot", addr 0, size = active bytes in the snapshot.
  void record_snapshot(int device, size_t active_bytes) {
    TraceEntry t;
    t.action = TraceAction::kSnapshot;
    t.device = device;
    t.size = active_bytes;
    record(std::move(t));
  }
  // Oldest first, times in Unix microseconds.
  std::vector<TraceEntry> entries() const;
  size_t size() const { return ring_.size(); }

 private:
  // Appends to the ring (dropping the oldest when full); time_us as stored.
  void store(TraceEntry entry);
  // The slot the next entry goes to: the oldest entry's once the ring is
  // full (the steady state: an index step, no size arithmetic), else a new
  // one. Precondition: enabled (max_entries_ >= 1).
  TraceEntry& next_slot() {
    if (!full_) [[unlikely]] return grow_slot();
    TraceEntry& slot = ring_[next_];  // the oldest entry, dropped
    if (++next_ == max_entries_) next_ = 0;
    return slot;
  }
  // Appends a slot while the ring is below max_entries_.
  TraceEntry& grow_slot();
  // The ring oldest first, times as stored.
  std::vector<TraceEntry> ordered() const;
  // What goes into time_us while recording: clock_() or raw ticks.
  int64_t now() const {
    return clock_ ? clock_() : static_cast<int64_t>(TraceClock::ticks());
  }

  Clock clock_;
  TraceClock ticks_clock_;  // converts ring entries when clock_ is unset
  bool enabled_ = false;
  bool keep_context_ = true;
  size_t max_entries_ = 0;
  // ring_.size() == max_entries_: entries now overwrite the oldest. While
  // false, next_ is 0 and entries are appended.
  bool full_ = false;
  std::vector<TraceEntry> ring_;
  size_t next_ = 0;  // index of the oldest entry once the ring is full
};

}  // namespace cachealloc
