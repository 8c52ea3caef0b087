#include "allocator/simulated_device.h"

#include <string>

#include "allocator/errors.h"

namespace cachealloc {

SimulatedDevice::SimulatedDevice(size_t capacity, uintptr_t base)
    : base_(base), memory_(capacity / kAlignment * kAlignment, kAlignment) {}

uintptr_t SimulatedDevice::allocate(int, size_t bytes, StreamId) {
  if (refuse_next_ > 0) {
    --refuse_next_;
    return 0;
  }
  if (!memory_.has_room(bytes)) return 0;
  const size_t aligned = memory_.footprint(bytes);
  // First fit: walk the gaps between live ranges in address order.
  uintptr_t candidate = base_;
  for (const auto& [addr, size] : memory_.segments()) {
    if (addr - candidate >= aligned) break;
    candidate = addr + memory_.footprint(size);
  }
  if (candidate + aligned > base_ + memory_.capacity()) return 0;  // fragmented
  memory_.add(candidate, bytes);
  return candidate;
}

void SimulatedDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = memory_.find(address, bytes);
  if (it == memory_.segments().end())
    throw BackendError("simulated device: release of unknown segment at " +
                       std::to_string(address) + " (" + std::to_string(bytes) +
                       " bytes)");
  memory_.remove(it);
}

DeviceMemoryInfo SimulatedDevice::memory_info(int) { return memory_.info(); }

EventId SimulatedDevice::record_event(int, StreamId) {
  const EventId id = memory_.record_event(hold_events_);
  live_events_.insert(id);
  return id;
}

bool SimulatedDevice::event_completed(EventId event) { return memory_.event_completed(event); }

void SimulatedDevice::synchronize_event(EventId event) {
  // Waiting on the host completes it: nothing else runs on this device.
  memory_.complete_event(event);
}

void SimulatedDevice::destroy_event(EventId event) {
  if (live_events_.erase(event) == 0)
    throw BackendError("simulated device: unknown event " + std::to_string(event));
  memory_.complete_event(event);
}

}  // namespace cachealloc
