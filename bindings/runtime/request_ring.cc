// The OOM flight recorder's request ring (Runtime::record_requests): what a
// what-if replay needs at an out-of-memory error (the order, sizes and
// streams of every allocation and free, with the segment events and OOMs),
// recorded whenever the recorder is on, whether or not the user turned
// history on. One RequestRing (stats/request_ring.h) per device, apart
// from the history so that the user's torch.cuda.memory._snapshot() never
// shows it.
#include <mutex>

#include "bindings/runtime/runtime.h"

namespace cachealloc {

void Runtime::set_request_rings(Generation& g, size_t records) {
  const size_t devices = static_cast<size_t>(g.allocator.device_count());
  // Built first, outside any device lock: a std::bad_alloc changes nothing.
  std::vector<std::unique_ptr<RequestRing>> fresh(devices);
  for (size_t d = 0; d < devices; ++d)
    if (records != 0 && !(g.requests[d] && g.requests[d]->capacity() == records))
      fresh[d] = std::make_unique<RequestRing>(records);
  for (size_t d = 0; d < devices; ++d) {
    if (records != 0 && !fresh[d]) continue;  // on at this size already: kept
    std::unique_ptr<RequestRing> old;
    g.allocator.with_device(static_cast<int>(d), [&](DeviceCachingAllocator& e) {
      // Observers are called under this lock only: swapped here, the old
      // ring sees no event after it and may be freed once outside.
      if (g.requests[d]) e.remove_observer(g.requests[d].get());
      old = std::move(g.requests[d]);
      g.requests[d] = std::move(fresh[d]);
      if (g.requests[d]) e.add_observer(g.requests[d].get());
    });
  }
}

void Runtime::record_requests(size_t records) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (Generation* g = current_.load(std::memory_order_acquire)) set_request_rings(*g, records);
  request_records_.store(records, std::memory_order_relaxed);
}

std::vector<Runtime::RequestRingView> Runtime::request_rings() {
  std::vector<RequestRingView> out;
  Generation* g = current_.load(std::memory_order_acquire);
  if (!g) return out;
  for (int d = 0; d < g->allocator.device_count(); ++d)
    g->allocator.with_device(d, [&](DeviceCachingAllocator&) {
      RequestRingView& v = out.emplace_back();
      if (const RequestRing* ring = g->requests[static_cast<size_t>(d)].get()) {
        v.entries = ring->entries(d);
        v.wrapped = ring->wrapped();
      }
    });
  return out;
}

}  // namespace cachealloc
