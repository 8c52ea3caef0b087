// The OOM flight recorder's request ring (Runtime::record_requests): what a
// what-if replay needs at an out-of-memory error (the order, sizes and
// streams of every allocation and free, with the segment events and OOMs),
// recorded whenever the recorder is on, whether or not the user turned
// history on.
//
// Why a second HistoryRecorder per device and not the history itself: the
// user's torch.cuda.memory._snapshot() must stay exactly native's, with no
// trace entry unless the user asked for history; and the user's
// _record_memory_history(enabled=None) must not blind the recorder. The
// ring is frameless (no context is ever stored), stamped with TSC ticks
// (the history's fast path: about 100 instructions per cache-hit pair), and
// allocated whole when turned on, so recording never allocates host memory.
#include <mutex>

#include "bindings/runtime/runtime.h"

namespace cachealloc {

void Runtime::set_request_rings(Generation& g, size_t records) {
  for (int d = 0; d < g.allocator.device_count(); ++d)
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
      HistoryRecorder& h = *g.requests[static_cast<size_t>(d)];
      if (records != 0 && h.enabled() && h.max_entries() == records) return;  // as it is
      // Off first: a ring turned on again, or resized, starts empty.
      if (h.enabled()) {
        e.remove_observer(&h);
        h.disable();
      }
      if (records == 0) return;
      h.enable(records, false);  // an empty ring: allocates nothing
      try {
        h.reserve_ring();
      } catch (...) {
        h.disable();
        throw;
      }
      e.add_observer(&h);
    });
}

void Runtime::record_requests(size_t records) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (Generation* g = current_.load(std::memory_order_acquire)) {
    try {
      set_request_rings(*g, records);
    } catch (...) {
      // Some devices may have turned on: all off, as the setting says.
      set_request_rings(*g, 0);
      request_records_.store(0, std::memory_order_relaxed);
      throw;
    }
  }
  request_records_.store(records, std::memory_order_relaxed);
}

std::vector<Runtime::RequestRing> Runtime::request_rings() {
  std::vector<RequestRing> out;
  Generation* g = current_.load(std::memory_order_acquire);
  if (!g) return out;
  for (int d = 0; d < g->allocator.device_count(); ++d)
    g->allocator.with_device(d, [&](DeviceCachingAllocator&) {
      const HistoryRecorder& h = *g->requests[static_cast<size_t>(d)];
      RequestRing& r = out.emplace_back();
      if (!h.enabled()) return;
      r.entries = h.entries();
      r.full = h.full();
    });
  return out;
}

}  // namespace cachealloc
