#include "allocator/simulated_device.h"

#include <string>

#include "allocator/errors.h"

namespace cachealloc {

SimulatedDevice::SimulatedDevice(size_t capacity, uintptr_t base)
    : base_(base), capacity_(capacity / kAlignment * kAlignment) {}

uintptr_t SimulatedDevice::allocate(int, size_t bytes, StreamId) {
  if (refuse_next_ > 0) {
    --refuse_next_;
    return 0;
  }
  const size_t aligned = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes == 0 || aligned > capacity_ - used_) return 0;
  // First fit: walk the gaps between live ranges in address order.
  uintptr_t candidate = base_;
  for (const auto& [addr, size] : ranges_) {
    if (addr - candidate >= aligned) break;
    candidate = addr + ((size + kAlignment - 1) / kAlignment * kAlignment);
  }
  if (candidate + aligned > base_ + capacity_) return 0;  // fragmented
  ranges_.emplace(candidate, bytes);
  used_ += aligned;
  return candidate;
}

void SimulatedDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = ranges_.find(address);
  if (it == ranges_.end() || it->second != bytes)
    throw BackendError("simulated device: release of unknown segment at " +
                       std::to_string(address) + " (" + std::to_string(bytes) +
                       " bytes)");
  used_ -= (bytes + kAlignment - 1) / kAlignment * kAlignment;
  ranges_.erase(it);
}

DeviceMemoryInfo SimulatedDevice::memory_info(int) {
  return DeviceMemoryInfo{capacity_ - used_, capacity_};
}

EventId SimulatedDevice::record_event(int, StreamId) {
  const EventId id = next_event_++;
  live_events_.insert(id);
  if (hold_events_) pending_events_.insert(id);
  return id;
}

bool SimulatedDevice::event_completed(EventId event) {
  return !pending_events_.contains(event);
}

void SimulatedDevice::synchronize_event(EventId event) {
  // Waiting on the host completes it: nothing else runs on this device.
  pending_events_.erase(event);
}

void SimulatedDevice::destroy_event(EventId event) {
  if (live_events_.erase(event) == 0)
    throw BackendError("simulated device: unknown event " + std::to_string(event));
  pending_events_.erase(event);
}

}  // namespace cachealloc
