// The allocation history behind torch.cuda.memory._record_memory_history:
// a bounded ring of trace entries with native's action names and fields.
//
// When full, the oldest entry is dropped for each new one. Disabling clears
// the ring, as native does. Called under the engine's lock.
//
// Memory: 40 bytes per ring record (max_entries records at most), plus 16
// bytes per record once contexts are kept, plus the contexts themselves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "allocator/base/call_context.h"
#include "allocator/engine/observe/engine_observer.h"
#include "stats/trace_clock.h"

namespace cachealloc {

// The actions the CUDA allocator records, in native's order: every action
// but kUserDefined (annotations, which skip_actions cannot name). The one
// list that the C API, the PyTorch glue and the Python package read.
inline constexpr EventKind kRecordedActions[] = {
    EventKind::kAlloc,        EventKind::kFreeRequested, EventKind::kFreeCompleted,
    EventKind::kSegmentAlloc, EventKind::kSegmentFree,   EventKind::kSegmentMap,
    EventKind::kSegmentUnmap, EventKind::kOom,           EventKind::kSnapshot};
// A set of actions, bit (1 << action) each.
using ActionMask = uint16_t;
constexpr ActionMask action_bit(EventKind a) {
  return static_cast<ActionMask>(1u << static_cast<unsigned>(a));
}
static_assert(static_cast<unsigned>(EventKind::kUserDefined) < 8 * sizeof(ActionMask),
              "every action needs a bit in ActionMask");

struct TraceEntry {
  EventKind action = EventKind::kAlloc;
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

// The size a trace entry of event `e` carries, or nullopt when its kind is
// not traced (retries and syncs are counted in stats, as native): the
// requested bytes for alloc and free entries (kFree: a free_requested and
// free_completed pair), the segment's or pages' bytes for segment entries,
// the rounded request for kOom. Shared by the history and the OOM
// recorder's request ring (stats/request_ring.h).
inline std::optional<size_t> traced_size(const EngineEvent& e) {
  switch (e.kind) {
    case EventKind::kAlloc:
    case EventKind::kFree:
    case EventKind::kFreeRequested:
    case EventKind::kFreeCompleted: return e.requested;
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentFree:
    case EventKind::kSegmentMap:
    case EventKind::kSegmentUnmap:
    case EventKind::kOom: return e.size;
    default: return std::nullopt;
  }
}

class HistoryRecorder : public EngineObserver {
 public:
  // Microseconds since the Unix epoch; set one so replays can stamp entries
  // with recorded times. Without one (the default) entries are stamped with
  // TraceClock ticks, a few cycles each, and converted when read.
  using Clock = std::function<int64_t()>;
  static int64_t system_clock_us();

  explicit HistoryRecorder(Clock clock = nullptr) : clock_(std::move(clock)) {
    update_plain();
  }

  // Starts (or keeps) recording with room for `max_entries` (>= 1; 0 counts
  // as 1); when `keep_context` is false entries carry no frames (native's
  // "state" level). Entries already recorded are kept (the newest
  // `max_entries` of them). May throw std::bad_alloc; nothing changes then.
  void enable(size_t max_entries, bool keep_context);
  // Stops recording and drops what was recorded.
  void disable();
  bool enabled() const { return enabled_; }
  // Set it (or clear it) before recording: entries already in the ring keep
  // the time base they were stamped with, and entries() reads the whole ring
  // in the current one (replays set it once, before enabling).
  void set_clock(Clock clock) {
    clock_ = std::move(clock);
    update_plain();
  }
  // Entries of these actions are not recorded from now on (native's
  // skip_actions; entries already recorded stay). 0, the default, records
  // every action. A cache-hit free whose free_requested (or
  // free_completed) is skipped records only the other one.
  void set_skipped(ActionMask skipped) {
    skipped_ = skipped;
    update_plain();
  }
  ActionMask skipped() const { return skipped_; }

  void on_event(const EngineEvent& e) override;
  // Adds an entry that did not come from the engine (snapshot, annotation),
  // stamped with the current time (entry.time_us is overwritten).
  void record(TraceEntry entry);
  // Records that a snapshot was taken, as native does after building one:
  // action "snapshot", addr 0, size = active bytes in the snapshot.
  void record_snapshot(int device, size_t active_bytes) {
    TraceEntry t;
    t.action = EventKind::kSnapshot;
    t.device = device;
    t.size = active_bytes;
    record(std::move(t));
  }
  // The newest max_entries entries (or all, if fewer), oldest first, times
  // in Unix microseconds.
  std::vector<TraceEntry> entries() const;
  // How many entries entries() returns.
  size_t size() const { return full_ ? max_entries_ : std::min(entries_in_ring_, max_entries_); }

 private:
  // How the ring stores entries. Why not TraceEntry: with history on, the
  // ring is most of the memory traffic of a cache-hit pair (a 100k-entry
  // ring is megabytes, far beyond L2, so every new line is a miss). A Record
  // is 40 bytes, without the 16-byte context (kept aside, only when there is
  // one), and one Record holds a whole cache-hit free: native's
  // free_requested and free_completed, written back to back with the same
  // time. A pair is then 80 bytes in two Records instead of 168 in three
  // entries.
  struct Record {
    int64_t time = 0;  // TraceClock ticks, or the set Clock's microseconds
    uintptr_t address = 0;
    size_t size = 0;
    StreamId stream = 0;
    int32_t device = 0;
    EventKind action = EventKind::kAlloc;
    // 1, or 2 for a free: action is kFreeRequested and a kFreeCompleted
    // entry, same fields and time, follows it.
    uint8_t entries = 1;
    // contexts_ holds this record's context at the same index.
    bool has_context = false;
  };
  static_assert(sizeof(Record) == 40);

  // The event's context if entries keep frames and the call had some; else
  // null (the common case with context=None).
  const ContextPtr* kept_context(const EngineEvent& e) const {
    return keep_context_ && e.context && *e.context ? e.context : nullptr;
  }
  // on_event for everything but the steady state's frameless cache-hit
  // pair; out of line, so that the fast path saves no registers.
  [[gnu::noinline]] void record_event(const EngineEvent& e);
  // Appends a record, overwriting the oldest once the ring is full. May
  // throw std::bad_alloc while the ring grows; nothing changes then.
  void store(const Record& r, const ContextPtr* context);
  // The slot the next record goes to: the oldest record's once the ring is
  // full (the steady state: an index step, no size arithmetic), else a new
  // one. Precondition: enabled (max_entries_ >= 1).
  size_t next_slot(uint8_t entries) {
    if (!full_) [[unlikely]] return grow_slot(entries);
    const size_t i = next_;
    if (++next_ == max_entries_) next_ = 0;
    return i;
  }
  // Appends a slot for a record of `entries` entries while the ring holds
  // fewer than max_entries_ records.
  size_t grow_slot(uint8_t entries);
  // Calls fn(i) for each ring index, oldest record first.
  template <typename Fn>
  void for_each_index(Fn&& fn) const {
    for (size_t i = next_; i < ring_.size(); ++i) fn(i);
    for (size_t i = 0; i < next_; ++i) fn(i);
  }
  // Every entry of the ring, oldest first, times as stored (the first few
  // may lie beyond the newest max_entries_; callers trim).
  std::vector<TraceEntry> expand() const;
  bool is_skipped(EventKind a) const { return (skipped_ & action_bit(a)) != 0; }
  void update_plain() { plain_ = !clock_ && skipped_ == 0; }
  // What goes into time_us while recording: clock_() or raw ticks.
  int64_t now() const {
    return clock_ ? clock_() : static_cast<int64_t>(TraceClock::ticks());
  }

  Clock clock_;
  ActionMask skipped_ = 0;
  // No clock set and nothing skipped: on_event's fast path may run. One
  // flag, so that the fast path tests one byte for both.
  bool plain_ = true;
  TraceClock ticks_clock_;  // converts ring entries when clock_ is unset
  bool enabled_ = false;
  bool keep_context_ = true;
  size_t max_entries_ = 0;
  // The ring holds up to max_entries_ records. Each record is one or two
  // entries, so the newest max_entries_ entries always lie within it;
  // entries() trims the excess (at most one entry per paired record).
  // Invariant: ring_.size() <= max_entries_, and full_ == (ring_.size() ==
  // max_entries_). While not full, next_ is 0 and records are appended;
  // once full, next_ is the index of the oldest record, overwritten next.
  bool full_ = false;
  std::vector<Record> ring_;
  // contexts_[i] is ring_[i]'s context where ring_[i].has_context; empty
  // until a context is first kept. Never shorter than needed: sized to
  // ring_.size() when a context is stored.
  std::vector<ContextPtr> contexts_;
  size_t next_ = 0;
  // Sum of ring_[i].entries while the ring is not full. Not kept once full:
  // max_entries_ records hold at least max_entries_ entries, and that is
  // all size() needs.
  size_t entries_in_ring_ = 0;
  // How many records in ring_ have has_context set. While 0, on_event's
  // fast path knows the slot it overwrites holds no frames without loading
  // it.
  size_t context_records_ = 0;
};

}  // namespace cachealloc
