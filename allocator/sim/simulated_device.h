// A device that exists only in host memory bookkeeping: no bytes are ever
// touched, only address ranges handed out and taken back. It lets the whole
// engine run, be tested and replay traces on any CPU.
//
// Addresses are first fit in [base, base + capacity), aligned to 2 MiB as
// cudaMalloc's are. Expandable segments reserve address ranges from
// kReserveOffset above base on (first fit, no physical memory) and map
// pages into them; mapped pages use the capacity as segments do. Events
// are complete at once unless hold_events(true): then they stay pending
// until complete_events() (to test cross-stream safety). The bookkeeping is
// SimulatedMemory's (simulated_memory.h); this adds the placement and the
// failure injection. Not thread-safe; the allocator front serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/sim/simulated_backend.h"

namespace cachealloc {

class SimulatedDevice : public SimulatedBackend {
 public:
  static constexpr uintptr_t kDefaultBase = uintptr_t{0x7f0000000000};
  static constexpr size_t kAlignment = 2097152;  // 2 MiB
  // Reservations start this far above base (16 TiB: past any capacity).
  static constexpr uintptr_t kReserveOffset = uintptr_t{1} << 44;

  // capacity: bytes the device holds (rounded down to kAlignment).
  explicit SimulatedDevice(size_t capacity, uintptr_t base = kDefaultBase);

  uintptr_t allocate(int device, size_t bytes, StreamId stream) override;
  uintptr_t reserve_address_range(int device, size_t bytes, size_t alignment) override;
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                 PageCells cells, StreamId stream) override;

  // Failure injection: the next `n` allocate() calls report a full device.
  void refuse_next_allocations(int n) { refuse_next_ = n; }
  // Failure injection: the next map_pages() creates pages 0..k-1 and fails
  // at page k as a device out of memory does (cuMemCreate), releasing the
  // pages it made.
  void refuse_page_of_next_map(size_t k) { refuse_page_ = k; }
  // Failure injection: the next map_pages() fails with a BackendError
  // (a driver error other than out of memory) after creating page k.
  void fail_page_of_next_map(size_t k) { fail_page_ = k; }
  // While held, recorded events stay pending until complete_events().
  void hold_events(bool hold) { memory_.hold_events(hold); }
  void complete_events() { memory_.complete_all_events(); }

  size_t used_bytes() const { return memory_.used(); }
  size_t capacity() const { return memory_.capacity(); }
  size_t live_segments() const { return memory_.segments().size(); }
  size_t live_reservations() const { return memory_.reservations().size(); }
  size_t mapped_pages() const { return memory_.mapped_pages(); }
  size_t live_events() const { return memory_.live_events(); }

 private:
  static constexpr size_t kNoFault = SimulatedMemory::kNoPageLimit;

  const uintptr_t base_;
  int refuse_next_ = 0;
  size_t refuse_page_ = kNoFault;
  size_t fail_page_ = kNoFault;
};

}  // namespace cachealloc
