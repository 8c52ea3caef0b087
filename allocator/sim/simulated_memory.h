// The bookkeeping every simulated device shares (SimulatedDevice here,
// replay's RecordedAddressDevice, the lab's WhatIfDevice): live segments, reserved
// address ranges and the pages mapped into them (expandable segments), the
// bytes they hold out of a fixed capacity, and events that complete when the
// device's owner says so. No byte is ever touched. Each device adds only
// where segments and reservations go (first fit, recorded addresses,
// address hints) and its own refusals (SimulatedBackend, simulated_backend.h).
//
// Invariants (check()):
//   - live segments' footprints (size rounded up to `alignment`) and live
//     reservations are pairwise disjoint, none wrapping around;
//   - every mapped page lies inside one live reservation, and pages are
//     pairwise disjoint;
//   - used = sum of segment footprints + sum of mapped page bytes <= capacity
//     (reservations hold no memory);
//   - pending events are live, and live events are ids in [1, last_event()].
//
// Exception safety: a call that throws (std::bad_alloc growing the
// bookkeeping, BackendError) changes nothing, as a driver call that fails.
//
// Not thread-safe. Costs, for n live extents (segments, reservations or
// pages): O(log n) to add, find or remove one; map and unmap O(log n) per
// page; first_fit O(log n) plus one step per extent it passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "allocator/base/device_backend.h"
#include "allocator/base/page_handles.h"
#include "allocator/base/strong_hash.h"

namespace cachealloc {

class SimulatedMemory {
 public:
  // address -> bytes, ordered for placement and overlap checks.
  using Extents = std::map<uintptr_t, size_t>;

  // name: how errors name the device ("simulated device"). capacity: bytes.
  // alignment: a segment holds its size rounded up to a multiple of this
  // (1: exactly its size). Events complete at once unless hold_events(true).
  SimulatedMemory(const char* name, size_t capacity, size_t alignment)
      : name_(name), capacity_(capacity), alignment_(alignment) {}

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t free_bytes() const { return capacity_ - used_; }
  DeviceMemoryInfo info() const { return {capacity_ - used_, capacity_}; }

  // Segments.

  // The bytes a segment of `bytes` holds.
  size_t footprint(size_t bytes) const { return (bytes + alignment_ - 1) / alignment_ * alignment_; }
  // Whether a segment of `bytes` (> 0) fits in the free bytes, wherever it
  // would go. (bytes is compared first: its footprint could wrap around.)
  bool has_room(size_t bytes) const {
    return bytes != 0 && bytes <= capacity_ - used_ && footprint(bytes) <= capacity_ - used_;
  }
  // Whether [address, address + extent) meets a live segment's footprint or
  // a live reservation. Precondition: the range does not wrap around.
  bool overlaps(uintptr_t address, size_t extent) const;
  // The lowest a >= from, `from` itself or a multiple of `alignment` above
  // it, at which [a, a + extent) meets no live segment or reservation; 0
  // when there is none below the top of the address space.
  uintptr_t first_fit(uintptr_t from, size_t extent, size_t alignment) const;
  // Precondition: has_room(bytes), and !overlaps(address, footprint(bytes)).
  void add_segment(uintptr_t address, size_t bytes);
  // Removes the live segment at `address` of exactly `bytes`. Throws
  // BackendError when there is none.
  void remove_segment(uintptr_t address, size_t bytes);
  const Extents& segments() const { return segments_; }

  // Reservations (address space only).

  // Precondition: bytes > 0, and !overlaps(base, bytes).
  void add_reservation(uintptr_t base, size_t bytes);
  // Reserves `bytes` at first_fit(from rounded up to `alignment`) and
  // returns the base. Throws BackendError for 0 bytes or alignment 0, or
  // when no such range is left below the top of the address space.
  uintptr_t reserve_first_fit(uintptr_t from, size_t bytes, size_t alignment);
  // Removes the live reservation at `base` of exactly `bytes`. Throws
  // BackendError when there is none, or while pages are mapped in it.
  void remove_reservation(uintptr_t base, size_t bytes);
  // Whether [address, address + bytes) lies inside one live reservation.
  bool reserved(uintptr_t address, size_t bytes = 1) const;
  const Extents& reservations() const { return reservations_; }

  // Pages.

  // Maps [address, address + bytes) as pages of `page_bytes` grouped into
  // handles as page_handles.h lays them out (`cells` first, if any, then one
  // handle per page), all or none:
  // returns false, with nothing mapped, when handle number `page_limit` (0
  // based) or an earlier one does not fit in the free bytes or is refused
  // (page_limit: the first handle the device refuses). Throws BackendError,
  // with nothing mapped, when the range is not whole pages inside one
  // reservation, or meets a page already mapped.
  bool map_pages(uintptr_t address, size_t bytes, size_t page_bytes,
                 size_t page_limit = kNoPageLimit, PageCells cells = {});
  // Throws BackendError, with nothing changed, unless the range is whole
  // pages inside one reservation that map_pages would accept. (The
  // validation map_pages starts with, for a device that fails differently.)
  void check_map_request(uintptr_t address, size_t bytes, size_t page_bytes,
                         PageCells cells = {}) const;
  // Unmaps [address, address + bytes): mapped handles, each of page_bytes
  // or (cells) cell_bytes, none crossing either end. Throws BackendError,
  // with nothing changed, otherwise.
  void unmap_pages(uintptr_t address, size_t bytes, size_t page_bytes, size_t cell_bytes = 0);
  // The driver calls a CUDA device would have made for the mappings and
  // unmappings so far (page_handles.h, PageCalls).
  const PageCalls& page_calls() const { return calls_; }
  size_t mapped_pages() const { return pages_.size(); }
  static constexpr size_t kNoPageLimit = ~size_t{0};

  // Events: ids count up from 1. While held, a recorded event stays
  // pending until complete_event(); otherwise it is complete at once.

  void hold_events(bool hold) { hold_events_ = hold; }
  EventId record_event();
  bool event_completed(EventId event) const { return !pending_.contains(event); }
  // Unknown, completed or destroyed events are ignored.
  void complete_event(EventId event) { pending_.erase(event); }
  void complete_all_events() { pending_.clear(); }
  // Throws BackendError for an event that is not live.
  void destroy_event(EventId event);
  // The event recorded last (0 before the first).
  EventId last_event() const { return next_event_ - 1; }
  size_t live_events() const { return live_events_.size(); }

  // Throws InvariantViolation naming the first invariant (above) that does
  // not hold. O(n).
  void check() const;

 private:
  [[noreturn]] void fail(const std::string& what) const;

  const char* const name_;
  const size_t capacity_;
  const size_t alignment_;
  size_t used_ = 0;  // segment footprints + mapped page bytes
  Extents segments_;      // address -> bytes asked for
  Extents reservations_;  // base -> bytes
  Extents pages_;         // handle address -> handle bytes (a page, or a cell)
  PageCalls calls_;
  bool hold_events_ = false;
  EventId next_event_ = 1;
  StrongHashSet<EventId> live_events_;
  StrongHashSet<EventId> pending_;  // subset of live_events_
};

}  // namespace cachealloc
