// The DeviceBackend contract over a SimulatedMemory, shared by the three
// simulated devices (SimulatedDevice, replay's RecordedAddressDevice, the lab's
// WhatIfDevice). A device adds where segments and reservations go
// (allocate, reserve_address_range) and may override the rest to add its
// own refusals or failure injection, calling these for the bookkeeping.
//
// Not thread-safe; the allocator front serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/base/device_backend.h"
#include "allocator/sim/simulated_memory.h"

namespace cachealloc {

class SimulatedBackend : public DeviceBackend {
 public:
  void release(int, uintptr_t address, size_t bytes) override {
    memory_.remove_segment(address, bytes);
  }
  DeviceMemoryInfo memory_info(int) override { return memory_.info(); }
  EventId record_event(int, StreamId) override { return memory_.record_event(); }
  bool event_completed(EventId event) override { return memory_.event_completed(event); }
  // Waiting on the host completes it: nothing else runs on this device.
  void synchronize_event(EventId event) override { memory_.complete_event(event); }
  void destroy_event(EventId event) override { memory_.destroy_event(event); }
  void release_address_range(int, uintptr_t base, size_t bytes) override {
    memory_.remove_reservation(base, bytes);
  }
  bool map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, PageCells cells,
                 StreamId) override {
    return memory_.map_pages(address, bytes, page_bytes, SimulatedMemory::kNoPageLimit, cells);
  }
  void unmap_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, size_t cell_bytes,
                   StreamId) override {
    memory_.unmap_pages(address, bytes, page_bytes, cell_bytes);
  }

  const SimulatedMemory& memory() const { return memory_; }
  // The event recorded last (0 before the first).
  EventId last_event() const { return memory_.last_event(); }
  // Lets `event` complete; unknown or destroyed events are ignored.
  void complete_event(EventId event) { memory_.complete_event(event); }
  // Throws InvariantViolation when the bookkeeping is inconsistent.
  void check() const { memory_.check(); }

 protected:
  SimulatedBackend(const char* name, size_t capacity, size_t alignment)
      : memory_(name, capacity, alignment) {}

  SimulatedMemory memory_;
};

}  // namespace cachealloc
