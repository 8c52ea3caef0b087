// Which device holds an address, for frees that do not say (PyTorch's
// tensor deleter passes no device): a hint that replaces the search of
// every device's pointer table.
//
// A direct-mapped cache from the address's 2 MiB granule to the device
// last found holding an address in it. Without it a free with no device
// locks and probes each device in turn, so a process that uses device k of
// n (a torchrun rank) pays k + 1 lock/probe steps per free; with it, one
// lookup and one lock, whatever n and k.
//
// Why a learned cache and not a table kept at segment creation: the engine
// reports segments only through observers, and an observer on every engine
// costs a virtual call per allocate and free on the cache-hit path, which
// must stay within ±2 instructions of what it was. The cache is written
// only on the slow path (a free whose device was not known) and read only
// by frees without a device.
//
// Invariants and guarantees:
//   - A slot holds 0 (empty) or (granule << kDeviceBits) | (device + 1).
//   - An answer is a hint, never trusted: the caller checks the device's
//     own pointer table under its lock, and falls back to the search on a
//     miss. So a stale slot (a segment released and its addresses reused by
//     another device), two devices' segments in one granule, or two granules
//     sharing a slot cost a search, never a wrong free.
//   - Cost: O(1) per lookup and per learn; the first device-less free in a
//     granule (and one after a slot is overwritten) pays one search.
//   - Thread-safe without locks: slots are relaxed atomics (a torn hint is
//     impossible, a stale one is checked as above). Memory: kSlots * 8 bytes
//     (128 KiB), fixed.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cachealloc {

class DeviceDirectory {
 public:
  // Devices it can name; a device at or above this is never cached (its
  // frees search, as before).
  static constexpr int kMaxDevices = (1 << 10) - 1;

  // The device last learned for `address`'s granule, or -1.
  int lookup(uintptr_t address) const {
    const uint64_t granule = address >> kGranuleShift;
    const uint64_t v = slots_[slot(granule)].load(std::memory_order_relaxed);
    if (v == 0 || (v >> kDeviceBits) != granule) return -1;
    return static_cast<int>(v & kDeviceMask) - 1;
  }

  // Records that `device` holds `address` (found by the search).
  void learn(uintptr_t address, int device) {
    if (device < 0 || device >= kMaxDevices) return;
    const uint64_t granule = address >> kGranuleShift;
    slots_[slot(granule)].store((granule << kDeviceBits) | static_cast<uint64_t>(device + 1),
                                std::memory_order_relaxed);
  }

 private:
  // 2 MiB: the small pool's segment size and the large pool's rounding,
  // so a granule rarely holds two segments.
  static constexpr unsigned kGranuleShift = 21;
  static constexpr unsigned kDeviceBits = 10;
  static constexpr uint64_t kDeviceMask = (uint64_t{1} << kDeviceBits) - 1;
  // 16,384 slots, one per 2 MiB granule of 32 GiB; two granules that hash
  // to one slot take turns (each then costs a search when it loses).
  static constexpr unsigned kSlotBits = 14;
  static constexpr size_t kSlots = size_t{1} << kSlotBits;
  static size_t slot(uint64_t granule) {
    // Fibonacci hashing spreads the granules of different devices' address
    // ranges (far apart) over the whole array.
    return static_cast<size_t>((granule * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits));
  }

  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace cachealloc
