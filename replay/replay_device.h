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
//
// Expandable segments: the trace records mappings (segment_map), not
// reservations. A reservation gets the base its reservation source names
// (the replayer looks ahead for the first mapping outside every live
// reservation: a segment's first mapping is at its base), under the same
// rules as a primed address; pages are mapped where the engine asks, and a
// mapping outside a live reservation is an error. Mapped pages count as
// used, reservations do not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "allocator/device_backend.h"

namespace cachealloc {

class ReplayDevice : public DeviceBackend {
 public:
  // capacity: bytes; allocations past it return 0 (device full).
  explicit ReplayDevice(size_t capacity) : capacity_(capacity) {}

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
  // Where reserve_address_range puts a range of (bytes, alignment); 0 for
  // nowhere in particular.
  void set_reservation_source(std::function<uintptr_t(size_t, size_t)> source) {
    reservation_source_ = std::move(source);
  }
  // Whether `address` lies in a live reservation.
  bool reserved(uintptr_t address) const;
  void stop_refusing() {
    refusing_ = false;
    releases_before_allocating_ = 0;
  }
  EventId last_event() const { return next_event_ - 1; }
  void complete_event(EventId id) { pending_.erase(id); }

  uintptr_t allocate(int, size_t bytes, StreamId) override;
  void release(int, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int) override { return {capacity_ - used_, capacity_}; }
  uintptr_t reserve_address_range(int, size_t bytes, size_t alignment) override;
  void release_address_range(int, uintptr_t base, size_t bytes) override;
  bool map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, StreamId) override;
  void unmap_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, StreamId) override;
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
  // Whether [address, address + bytes) is non-empty, above 0, does not wrap
  // and overlaps no live segment. O(log live segments).
  bool range_free(uintptr_t address, size_t bytes) const;
  // The first free range of `bytes` from next_unexpected_ on, 0 if none.
  uintptr_t unexpected_range(size_t bytes);

  // Unexpected segments come from here, far from any real device address.
  static constexpr uintptr_t kUnexpectedBase = uintptr_t{0xdead00000000000};
  const size_t capacity_;
  size_t used_ = 0;
  std::optional<Primed> primed_;
  bool refusing_ = false;
  size_t releases_before_allocating_ = 0;
  uintptr_t next_unexpected_ = kUnexpectedBase;
  // Live segments and reservations: address -> bytes. Ordered, to find
  // overlaps; only segment allocations and releases touch it, not every
  // request.
  std::map<uintptr_t, size_t> live_;
  // The live reservations (also in live_): base -> bytes.
  std::map<uintptr_t, size_t> reservations_;
  std::function<uintptr_t(size_t, size_t)> reservation_source_;
  EventId next_event_ = 1;
  absl::flat_hash_set<EventId> pending_;
};

}  // namespace cachealloc
