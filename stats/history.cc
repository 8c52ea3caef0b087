#include "stats/history.h"

#include <algorithm>
#include <chrono>

namespace cachealloc {

int64_t HistoryRecorder::system_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void HistoryRecorder::enable(size_t max_entries, bool keep_context) {
  if (max_entries == 0) max_entries = 1;
  if (max_entries != max_entries_ || next_ != 0) {
    // Rebuild oldest first. Built aside, so a bad_alloc changes nothing.
    std::vector<size_t> order;
    order.reserve(ring_.size());
    for_each_index([&](size_t i) { order.push_back(i); });
    // Exactly the entries entries() shows now, or the newest max_entries of
    // them: the hidden excess must not reappear when the ring grows.
    const size_t keep = std::min(size(), max_entries);
    size_t first = order.size();
    size_t held = 0;
    while (first > 0 && held < keep) held += ring_[order[--first]].entries;
    std::vector<Record> ring;
    std::vector<ContextPtr> contexts;
    ring.reserve(order.size() - first);
    if (!contexts_.empty()) contexts.reserve(order.size() - first);
    size_t entries = 0;
    size_t context_records = 0;
    for (size_t k = first; k < order.size(); ++k) {
      const size_t i = order[k];
      Record& r = ring.emplace_back(ring_[i]);
      if (k == first && held > keep) {
        // A free straddles the cut: keep its second entry only.
        r.action = EventKind::kFreeCompleted;
        r.entries = 1;
      }
      entries += r.entries;
      context_records += r.has_context;
      if (!contexts_.empty()) contexts.push_back(ring_[i].has_context ? contexts_[i] : nullptr);
    }
    ring_ = std::move(ring);
    contexts_ = std::move(contexts);
    context_records_ = context_records;
    entries_in_ring_ = entries;
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
  contexts_.clear();
  context_records_ = 0;
  next_ = 0;
  entries_in_ring_ = 0;
}

size_t HistoryRecorder::grow_slot(uint8_t entries) {
  ring_.emplace_back();
  entries_in_ring_ += entries;
  full_ = ring_.size() == max_entries_;
  return ring_.size() - 1;
}

void HistoryRecorder::store(const Record& r, const ContextPtr* context) {
  // Room for the context first: a bad_alloc leaves the ring as it was.
  if (context) [[unlikely]] {
    const size_t need = full_ ? ring_.size() : ring_.size() + 1;  // next index + 1
    if (contexts_.size() < need)
      contexts_.resize(std::min(std::max(contexts_.size() * 2, need), max_entries_));
  }
  const size_t i = next_slot(r.entries);
  Record& slot = ring_[i];
  const bool had_context = slot.has_context;
  slot = r;
  if (had_context) [[unlikely]] {
    contexts_[i].reset();  // the dropped record's frames
    --context_records_;
  }
  if (context) [[unlikely]] {
    contexts_[i] = *context;
    slot.has_context = true;
    ++context_records_;
  }
}

void HistoryRecorder::record(TraceEntry entry) {
  if (!enabled_ || is_skipped(entry.action)) return;
  Record r;
  r.time = now();
  r.address = entry.address;
  r.size = entry.size;
  r.stream = entry.stream;
  r.device = entry.device;
  r.action = entry.action;
  store(r, keep_context_ && entry.context ? &entry.context : nullptr);
}

void HistoryRecorder::on_event(const EngineEvent& e) {
  // The steady state's cache-hit pair: a full ring, frameless events
  // (context=None, or native's "state" level) stamped with ticks, no
  // skipped actions (plain_), and a slot whose old record holds no frames.
  // Written straight into the slot with no calls, so this path needs no
  // saved registers; everything else goes to record_event (a tail call).
  // (full_ implies enabled: disable() clears it.)
  const bool alloc = e.kind == EventKind::kAlloc;
  if (!full_ || !plain_ || !(alloc || e.kind == EventKind::kFree) || kept_context(e))
      [[unlikely]]
    return record_event(e);
  const size_t i = next_;
  Record& slot = ring_[i];
  // Tested on a member, not on the slot: the slot lies in a line not yet
  // in cache (the ring is megabytes), and a load that misses there would
  // hold up the call until memory answers; the stores below need not.
  if (context_records_ != 0 && slot.has_context) [[unlikely]] return record_event(e);
  next_ = i + 1 == max_entries_ ? 0 : i + 1;
  // A free is one record of two entries: native's free_requested and
  // free_completed, which native stamps with a clock read each. Here both
  // share one TSC read: they are written back to back, well under the
  // microsecond entries resolve to.
  slot.time = static_cast<int64_t>(TraceClock::ticks());
  slot.address = e.address;
  slot.size = e.requested;
  slot.stream = e.stream;
  slot.device = e.device;
  slot.action = alloc ? EventKind::kAlloc : EventKind::kFreeRequested;
  slot.entries = alloc ? 1 : 2;
}

void HistoryRecorder::record_event(const EngineEvent& e) {
  if (!enabled_) return;
  Record r;
  r.address = e.address;
  r.size = e.requested;  // block entries show what the caller asked for
  r.stream = e.stream;
  r.device = e.device;
  const ContextPtr* context = kept_context(e);
  // The two kinds of a cache-hit pair are tested first, one compare each.
  if (e.kind == EventKind::kAlloc) [[likely]] {
    r.action = EventKind::kAlloc;
  } else if (e.kind == EventKind::kFree) {
    // As on_event, but a set Clock (the replay's) hands out one recorded
    // time per entry, so it gets two records; a skipped action gets none.
    const bool requested = !is_skipped(EventKind::kFreeRequested);
    const bool completed = !is_skipped(EventKind::kFreeCompleted);
    if (requested && completed && !clock_) {
      r.action = EventKind::kFreeRequested;
      r.entries = 2;
    } else {
      if (requested) {
        r.action = EventKind::kFreeRequested;
        r.time = now();
        store(r, context);
      }
      if (!completed) return;
      r.action = EventKind::kFreeCompleted;
    }
  } else {
    const std::optional<size_t> size = traced_size(e);
    if (!size) return;  // retries and syncs are counted in stats, not traced (as native)
    r.action = e.kind;
    r.size = *size;
  }
  if (is_skipped(r.action)) return;
  r.time = now();
  store(r, context);
}

std::vector<TraceEntry> HistoryRecorder::expand() const {
  std::vector<TraceEntry> out;
  size_t count = 0;
  for (const Record& r : ring_) count += r.entries;
  out.reserve(count);
  for_each_index([&](size_t i) {
    const Record& r = ring_[i];
    TraceEntry& t = out.emplace_back();
    t.action = r.action;
    t.device = r.device;
    t.address = r.address;
    t.size = r.size;
    t.stream = r.stream;
    t.time_us = r.time;
    if (r.has_context) t.context = contexts_[i];
    if (r.entries == 2) {
      TraceEntry completed = t;
      completed.action = EventKind::kFreeCompleted;
      out.push_back(std::move(completed));
    }
  });
  return out;
}

std::vector<TraceEntry> HistoryRecorder::entries() const {
  std::vector<TraceEntry> out = expand();
  if (out.size() > max_entries_)
    out.erase(out.begin(), out.end() - static_cast<ptrdiff_t>(max_entries_));
  if (!clock_) {
    const TraceClock::Converter c = ticks_clock_.converter();
    for (TraceEntry& t : out) t.time_us = c.unix_us(static_cast<uint64_t>(t.time_us));
  }
  return out;
}

}  // namespace cachealloc
