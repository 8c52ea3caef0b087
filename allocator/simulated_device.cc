#include "allocator/simulated_device.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

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

uintptr_t SimulatedDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  if (bytes == 0 || alignment == 0)
    throw BackendError("simulated device: empty reservation or alignment 0");
  auto aligned = [alignment](uintptr_t a) { return (a + alignment - 1) / alignment * alignment; };
  uintptr_t candidate = aligned(base_ + kReserveOffset);
  for (const auto& [addr, size] : reservations_) {
    if (addr >= candidate && addr - candidate >= bytes) break;
    candidate = std::max(candidate, aligned(addr + size));
  }
  reservations_.emplace(candidate, bytes);
  return candidate;
}

void SimulatedDevice::release_address_range(int, uintptr_t base, size_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes)
    throw BackendError("simulated device: release of unknown reservation at " +
                       std::to_string(base));
  auto page = mapped_.lower_bound(base);
  if (page != mapped_.end() && page->first < base + bytes)
    throw BackendError("simulated device: reservation at " + std::to_string(base) +
                       " released with pages still mapped");
  reservations_.erase(it);
}

bool SimulatedDevice::in_reservation(uintptr_t address, size_t bytes) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return false;
  --it;
  return address >= it->first && address - it->first <= it->second &&
         bytes <= it->second - (address - it->first);
}

bool SimulatedDevice::map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes,
                                StreamId) {
  if (page_bytes == 0 || bytes == 0 || bytes % page_bytes != 0 || !in_reservation(address, bytes))
    throw BackendError("simulated device: map of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(address) + " outside a reservation or not whole pages");
  for (uintptr_t p = address; p < address + bytes; p += page_bytes)
    if (mapped_.contains(p))
      throw BackendError("simulated device: page at " + std::to_string(p) + " mapped twice");
  const size_t refuse = std::exchange(refuse_page_, kNoFault);
  const size_t fail = std::exchange(fail_page_, kNoFault);
  // Pages are made one by one (cuMemCreate each); a failure releases the
  // ones made so far, so nothing of this call stays.
  std::vector<uintptr_t> made;
  auto undo = [&] {
    for (uintptr_t p : made) mapped_.erase(p);
    used_ -= made.size() * page_bytes;
  };
  for (size_t k = 0; k * page_bytes < bytes; ++k) {
    if (k == refuse || page_bytes > capacity_ - used_) {
      undo();
      return false;
    }
    if (k == fail) {
      undo();
      throw BackendError("simulated device: injected driver error mapping page " +
                         std::to_string(k));
    }
    const uintptr_t p = address + k * page_bytes;
    mapped_.emplace(p, page_bytes);
    made.push_back(p);
    used_ += page_bytes;
  }
  return true;
}

void SimulatedDevice::unmap_pages(int, uintptr_t address, size_t bytes, size_t page_bytes,
                                  StreamId) {
  if (page_bytes == 0 || bytes % page_bytes != 0)
    throw BackendError("simulated device: unmap of partial pages");
  for (uintptr_t p = address; p < address + bytes; p += page_bytes) {
    auto it = mapped_.find(p);
    if (it == mapped_.end() || it->second != page_bytes)
      throw BackendError("simulated device: unmap of a page that is not mapped at " +
                         std::to_string(p));
  }
  for (uintptr_t p = address; p < address + bytes; p += page_bytes) mapped_.erase(p);
  used_ -= bytes;
}

void SimulatedDevice::destroy_event(EventId event) {
  if (live_events_.erase(event) == 0)
    throw BackendError("simulated device: unknown event " + std::to_string(event));
  pending_events_.erase(event);
}

}  // namespace cachealloc
