// The simulated device a replay runs on: it hands out the segment addresses
// the trace recorded, so every later address can be compared exactly.
//
// Before each request the replayer "primes" the device with the next
// recorded segment_alloc; an allocate() of that size gets that address. An
// unexpected allocate() gets an address from a separate range, so the
// divergence shows at once. Events stay pending until the replayer marks
// them complete (the trace says when a delayed free completed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/device_backend.h"

namespace cachealloc {

class ReplayDevice : public DeviceBackend {
 public:
  // capacity: bytes; allocations past it return 0 (device full).
  explicit ReplayDevice(size_t capacity) : capacity_(capacity) {}

  void prime(uintptr_t address, size_t bytes) { primed_ = Primed{address, bytes}; }
  void unprime() { primed_.reset(); }
  EventId last_event() const { return next_event_ - 1; }
  void complete_event(EventId id) { pending_.erase(id); }

  uintptr_t allocate(int, size_t bytes, StreamId) override;
  void release(int, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int) override { return {capacity_ - used_, capacity_}; }
  EventId record_event(int, StreamId) override {
    pending_.insert(next_event_);
    return next_event_++;
  }
  bool event_completed(EventId id) override { return !pending_.contains(id); }
  void synchronize_event(EventId id) override { pending_.erase(id); }
  void destroy_event(EventId id) override { pending_.erase(id); }

 private:
  struct Primed {
    uintptr_t address;
    size_t bytes;
  };
  // Unexpected segments come from here, far from any real device address.
  static constexpr uintptr_t kUnexpectedBase = uintptr_t{0xdead00000000000};
  const size_t capacity_;
  size_t used_ = 0;
  std::optional<Primed> primed_;
  uintptr_t next_unexpected_ = kUnexpectedBase;
  absl::flat_hash_map<uintptr_t, size_t> live_;
  EventId next_event_ = 1;
  absl::flat_hash_set<EventId> pending_;
};

}  // namespace cachealloc
