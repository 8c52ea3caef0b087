#include "replay/whatif_device.h"

#include <string>

#include "allocator/errors.h"

namespace cachealloc {

bool WhatIfDevice::range_free(uintptr_t address, size_t bytes) const {
  if (address < kBase || address % kAlignment != 0 || address - kBase > capacity_ ||
      bytes > capacity_ - (address - kBase))
    return false;
  auto next = ranges_.lower_bound(address);
  if (next != ranges_.end() && next->first < address + bytes) return false;
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + aligned(prev->second) > address) return false;
  }
  return true;
}

uintptr_t WhatIfDevice::allocate(int, size_t bytes, StreamId) {
  const size_t size = aligned(bytes);
  if (bytes == 0 || size > capacity_ - used_) return 0;
  uintptr_t at = 0;
  if (hint_address_ != 0 && hint_bytes_ == bytes && range_free(hint_address_, size)) {
    at = hint_address_;
    ++hints_taken_;
  } else {
    // First fit, as SimulatedDevice: walk the gaps in address order.
    uintptr_t candidate = kBase;
    for (const auto& [addr, length] : ranges_) {
      if (addr >= candidate && addr - candidate >= size) break;
      candidate = std::max(candidate, addr + aligned(length));
    }
    if (candidate + size > kBase + capacity_) return 0;  // fragmented
    at = candidate;
  }
  hint_address_ = 0;
  ranges_.emplace(at, bytes);
  used_ += size;
  return at;
}

void WhatIfDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = ranges_.find(address);
  if (it == ranges_.end() || it->second != bytes)
    throw BackendError("what-if device: release of unknown segment at " +
                       std::to_string(address) + " (" + std::to_string(bytes) + " bytes)");
  used_ -= aligned(bytes);
  ranges_.erase(it);
}

}  // namespace cachealloc
