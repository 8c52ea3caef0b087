#include "stats/request_ring.h"

#include <algorithm>

namespace cachealloc {

RequestRing::RequestRing(size_t records)
    : capacity_(std::max<size_t>(records, 1)),
      // Not zeroed: pages are touched as records are written.
      ring_(std::make_unique_for_overwrite<Record[]>(capacity_)) {}

void RequestRing::on_event(const EngineEvent& e) {
  // The cache-hit pair's two events: one compare each, four stores, no
  // clock. Everything else (segments, OOMs, deferred frees) out of line.
  if (e.kind != EventKind::kAlloc && e.kind != EventKind::kFree) [[unlikely]]
    return record_other(e);
  Record& r = next_record();
  r.address = e.address;
  r.size = e.requested;
  r.stream = e.stream;
  r.action = e.kind;
}

void RequestRing::record_other(const EngineEvent& e) {
  const std::optional<size_t> size = traced_size(e);
  if (!size) return;
  Record& r = next_record();
  r.address = e.address;
  r.size = *size;
  r.stream = e.stream;
  r.action = e.kind;
}

std::vector<TraceEntry> RequestRing::entries(int device) const {
  const size_t n = laps_ > 0 ? capacity_ : next_;
  const size_t first = laps_ > 0 ? next_ : 0;
  std::vector<TraceEntry> out;
  out.reserve(n + n / 2);
  for (size_t k = 0; k < n; ++k) {
    const Record& r = ring_[(first + k) % capacity_];
    TraceEntry& t = out.emplace_back();
    t.action = r.action == EventKind::kFree ? EventKind::kFreeRequested : r.action;
    t.device = device;
    t.address = r.address;
    t.size = r.size;
    t.stream = r.stream;
    if (r.action == EventKind::kFree) {
      TraceEntry completed = t;
      completed.action = EventKind::kFreeCompleted;
      out.push_back(completed);
    }
  }
  return out;
}

}  // namespace cachealloc
