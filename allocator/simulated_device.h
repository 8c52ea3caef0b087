// A device that exists only in host memory bookkeeping: no bytes are ever
// touched, only address ranges handed out and taken back. It lets the whole
// engine run, be tested and replay traces on any CPU.
//
// Addresses are first fit in [base, base + capacity), aligned to 2 MiB as
// cudaMalloc's are. Events are complete at once unless hold_events(true):
// then they stay pending until complete_events() (to test cross-stream
// safety). Not thread-safe; the allocator front serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>

#include "allocator/device_backend.h"
#include "allocator/simulated_memory.h"

namespace cachealloc {

class SimulatedDevice : public DeviceBackend {
 public:
  static constexpr uintptr_t kDefaultBase = uintptr_t{0x7f0000000000};
  static constexpr size_t kAlignment = 2097152;  // 2 MiB

  // capacity: bytes the device holds (rounded down to kAlignment).
  explicit SimulatedDevice(size_t capacity, uintptr_t base = kDefaultBase);

  uintptr_t allocate(int device, size_t bytes, StreamId stream) override;
  void release(int device, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int device) override;
  EventId record_event(int device, StreamId stream) override;
  bool event_completed(EventId event) override;
  void synchronize_event(EventId event) override;
  void destroy_event(EventId event) override;

  // Failure injection: the next `n` allocate() calls report a full device.
  void refuse_next_allocations(int n) { refuse_next_ = n; }
  // While held, recorded events stay pending until complete_events().
  void hold_events(bool hold) { hold_events_ = hold; }
  void complete_events() { memory_.complete_all_events(); }

  size_t used_bytes() const { return memory_.used(); }
  size_t capacity() const { return memory_.capacity(); }
  size_t live_segments() const { return memory_.segments().size(); }
  size_t live_events() const { return live_events_.size(); }

 private:
  const uintptr_t base_;
  SimulatedMemory memory_;  // segments' footprints are 2 MiB multiples
  int refuse_next_ = 0;
  bool hold_events_ = false;
  // Recorded and not yet destroyed: destroying any other event throws.
  std::set<EventId> live_events_;
};

}  // namespace cachealloc
