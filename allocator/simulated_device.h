// A device that exists only in host memory bookkeeping: no bytes are ever
// touched, only address ranges handed out and taken back. It lets the whole
// engine run, be tested and replay traces on any CPU.
//
// Addresses are first fit in [base, base + capacity), aligned to 2 MiB as
// cudaMalloc's are. Expandable segments reserve address ranges from
// kReserveOffset above base on (first fit, no physical memory) and map
// pages into them; mapped pages use the capacity as segments do. Events are complete at once unless hold_events(true):
// then they stay pending until complete_events() (to test cross-stream
// safety). Not thread-safe; the allocator front serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>

#include "allocator/device_backend.h"

namespace cachealloc {

class SimulatedDevice : public DeviceBackend {
 public:
  static constexpr uintptr_t kDefaultBase = uintptr_t{0x7f0000000000};
  static constexpr size_t kAlignment = 2097152;  // 2 MiB
  // Reservations start this far above base (16 TiB: past any capacity).
  static constexpr uintptr_t kReserveOffset = uintptr_t{1} << 44;

  // capacity: bytes the device holds (rounded down to kAlignment).
  explicit SimulatedDevice(size_t capacity, uintptr_t base = kDefaultBase);

  uintptr_t allocate(int device, size_t bytes, StreamId stream) override;
  void release(int device, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int device) override;
  EventId record_event(int device, StreamId stream) override;
  bool event_completed(EventId event) override;
  void synchronize_event(EventId event) override;
  void destroy_event(EventId event) override;
  uintptr_t reserve_address_range(int device, size_t bytes, size_t alignment) override;
  void release_address_range(int device, uintptr_t base, size_t bytes) override;
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                 StreamId stream) override;
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                   StreamId stream) override;

  // Failure injection: the next `n` allocate() calls report a full device.
  void refuse_next_allocations(int n) { refuse_next_ = n; }
  // Failure injection: the next map_pages() creates pages 0..k-1 and fails
  // at page k as a device out of memory does (cuMemCreate), releasing the
  // pages it made.
  void refuse_page_of_next_map(size_t k) { refuse_page_ = k; }
  // Failure injection: the next map_pages() fails with a BackendError
  // (a driver error other than out of memory) after creating page k.
  void fail_page_of_next_map(size_t k) { fail_page_ = k; }
  // Pages mapped now, and reservations live now.
  size_t mapped_pages() const { return mapped_.size(); }
  size_t live_reservations() const { return reservations_.size(); }
  // While held, recorded events stay pending until complete_events().
  void hold_events(bool hold) { hold_events_ = hold; }
  void complete_events() { pending_events_.clear(); }

  size_t used_bytes() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t live_segments() const { return ranges_.size(); }
  size_t live_events() const { return live_events_.size(); }

 private:
  const uintptr_t base_;
  const size_t capacity_;
  size_t used_ = 0;
  std::map<uintptr_t, size_t> ranges_;  // address -> bytes, live segments
  std::map<uintptr_t, size_t> reservations_;  // base -> bytes, live reservations
  std::map<uintptr_t, size_t> mapped_;        // page address -> page bytes
  static constexpr size_t kNoFault = ~size_t{0};
  size_t refuse_page_ = kNoFault;
  size_t fail_page_ = kNoFault;
  // Whether [address, address + bytes) lies inside one live reservation.
  bool in_reservation(uintptr_t address, size_t bytes) const;
  int refuse_next_ = 0;
  bool hold_events_ = false;
  EventId next_event_ = 1;
  std::set<EventId> live_events_;
  std::set<EventId> pending_events_;
};

}  // namespace cachealloc
