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
//
// The bookkeeping is SimulatedMemory's (allocator/sim/simulated_memory.h): a
// segment holds exactly its bytes, and events stay pending until
// complete_event(). This adds the placement and the refusals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "allocator/sim/simulated_backend.h"

namespace cachealloc {

class RecordedAddressDevice : public SimulatedBackend {
 public:
  // capacity: bytes; allocations past it return 0 (device full).
  explicit RecordedAddressDevice(size_t capacity)
      : SimulatedBackend("replay device", capacity, 1) {
    memory_.hold_events(true);
  }

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
  bool reserved(uintptr_t address) const { return memory_.reserved(address); }
  void stop_refusing() {
    refusing_ = false;
    releases_before_allocating_ = 0;
  }

  uintptr_t allocate(int, size_t bytes, StreamId) override;
  void release(int, uintptr_t address, size_t bytes) override;
  uintptr_t reserve_address_range(int, size_t bytes, size_t alignment) override;
  bool map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, PageCells cells,
                 StreamId) override;
  void unmap_pages(int, uintptr_t address, size_t bytes, size_t page_bytes, size_t cell_bytes,
                   StreamId) override;

 private:
  struct Primed {
    uintptr_t address;
    size_t bytes;
  };
  bool refusing() const { return refusing_ || releases_before_allocating_ > 0; }
  // Whether [address, address + bytes) is non-empty, above 0, does not wrap
  // and overlaps no live segment or reservation. O(log live ranges).
  bool range_free(uintptr_t address, size_t bytes) const;
  // The first free range of `bytes` from next_unexpected_ on, 0 if none.
  uintptr_t unexpected_range(size_t bytes);
  // A release (of a segment or of pages) towards refuse_until_releases.
  void count_release() {
    if (releases_before_allocating_ > 0) --releases_before_allocating_;
  }

  // Unexpected segments come from here, far from any real device address.
  static constexpr uintptr_t kUnexpectedBase = uintptr_t{0xdead00000000000};
  std::optional<Primed> primed_;
  bool refusing_ = false;
  size_t releases_before_allocating_ = 0;
  uintptr_t next_unexpected_ = kUnexpectedBase;
  std::function<uintptr_t(size_t, size_t)> reservation_source_;
};

}  // namespace cachealloc
