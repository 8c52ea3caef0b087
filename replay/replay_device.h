// The simulated device a replay runs on: it hands out the segment addresses
// the trace recorded, so every later address can be compared exactly.
//
// Before each request the replayer "primes" the device with the next
// recorded segment_alloc; an allocate() of that size gets that address. An
// unexpected allocate() gets an address from a separate range, so the
// divergence shows at once. Events stay pending until the replayer marks
// them complete (the trace says when a delayed free completed).
//
// The trace is untrusted: a primed address is taken only when the range
// [address, address + bytes) is non-zero, does not wrap around, and
// overlaps no live segment; otherwise the allocation is unexpected. So,
// whatever the trace says, live segments never overlap (the engine relies
// on it: blocks of two segments at one address would corrupt its indexes),
// and a trace that claims otherwise diverges instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "allocator/device_backend.h"
#include "allocator/simulated_memory.h"

namespace cachealloc {

class ReplayDevice : public DeviceBackend {
 public:
  // capacity: bytes; allocations past it return 0 (device full).
  explicit ReplayDevice(size_t capacity) : memory_(capacity, 1) {}

  void prime(uintptr_t address, size_t bytes) { primed_ = Primed{address, bytes}; }
  void unprime() { primed_.reset(); }
  // Until stop_refusing(), every allocate() fails as a full device does.
  // For a request the trace records as an OOM: the device refused it there
  // whatever its free bytes said (other processes, the CUDA context,
  // fragmentation), and an OOM request reserves nothing.
  void refuse_all() { refusing_ = true; }
  // Every allocate() fails until `releases` more release() calls: a request
  // that the trace shows freeing that many segments and then reserving one,
  // where the device refused it until then though its free bytes said it
  // fit.
  void refuse_until_releases(size_t releases) { releases_before_allocating_ = releases; }
  void stop_refusing() {
    refusing_ = false;
    releases_before_allocating_ = 0;
  }
  EventId last_event() const { return memory_.last_event(); }
  void complete_event(EventId id) { memory_.complete_event(id); }

  uintptr_t allocate(int, size_t bytes, StreamId) override;
  void release(int, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int) override { return memory_.info(); }
  EventId record_event(int, StreamId) override { return memory_.record_event(true); }
  bool event_completed(EventId id) override { return memory_.event_completed(id); }
  void synchronize_event(EventId id) override { memory_.complete_event(id); }
  void destroy_event(EventId id) override { memory_.complete_event(id); }

 private:
  struct Primed {
    uintptr_t address;
    size_t bytes;
  };
  // Whether [address, address + bytes) is non-empty, above 0, does not wrap
  // and overlaps no live segment. O(log live segments).
  bool range_free(uintptr_t address, size_t bytes) const;

  // Unexpected segments come from here, far from any real device address.
  static constexpr uintptr_t kUnexpectedBase = uintptr_t{0xdead00000000000};
  // Segments hold exactly their bytes (no alignment: the trace's own
  // sizes); every event stays pending until complete_event().
  SimulatedMemory memory_;
  std::optional<Primed> primed_;
  bool refusing_ = false;
  size_t releases_before_allocating_ = 0;
  uintptr_t next_unexpected_ = kUnexpectedBase;
};

}  // namespace cachealloc
