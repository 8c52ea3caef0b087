#include "lab/whatif_device.h"

#include <algorithm>
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
    // First fit, as SimulatedDevice: the lowest gap that holds `size`,
    // walking the gaps in address order from the furthest cursor that
    // applies (no gap of `size` bytes starts below it).
    uintptr_t candidate = kBase;
    for (const FitCursor& c : cursors_)
      if (c.size <= size) candidate = std::max(candidate, c.from);
    auto it = ranges_.upper_bound(candidate);
    if (it != ranges_.begin()) {
      const auto& [addr, length] = *std::prev(it);
      candidate = std::max(candidate, addr + aligned(length));
    }
    for (; it != ranges_.end(); ++it) {
      const auto& [addr, length] = *it;
      if (addr >= candidate && addr - candidate >= size) break;
      candidate = std::max(candidate, addr + aligned(length));
    }
    const bool fits = candidate + size <= kBase + capacity_;
    // Every gap below `candidate` is smaller than `size`; placing the
    // segment there moves that bound past it.
    const uintptr_t from = fits ? candidate + size : candidate;
    auto same = std::find_if(cursors_.begin(), cursors_.end(),
                             [size](const FitCursor& c) { return c.size == size; });
    if (same != cursors_.end()) cursors_.erase(same);
    else if (cursors_.size() == kMaxCursors) cursors_.erase(cursors_.begin());
    cursors_.push_back(FitCursor{size, from});
    if (!fits) return 0;  // fragmented
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
  it = ranges_.erase(it);
  // The gap the release opens or widens: [gap_start, gap_end). A cursor
  // past its start whose size now fits in it must move back to it.
  const uintptr_t gap_end = it == ranges_.end() ? kBase + capacity_ : it->first;
  uintptr_t gap_start = kBase;
  if (it != ranges_.begin()) {
    const auto& [addr, length] = *std::prev(it);
    gap_start = addr + aligned(length);
  }
  for (FitCursor& c : cursors_)
    if (c.from > gap_start && c.size <= gap_end - gap_start) c.from = gap_start;
}

uintptr_t WhatIfDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  if (bytes == 0 || alignment == 0)
    throw BackendError("what-if device: empty reservation or alignment 0");
  auto up = [alignment](uintptr_t a) { return (a + alignment - 1) / alignment * alignment; };
  uintptr_t candidate = up(kBase + 2 * capacity_);
  for (const auto& [base, length] : reservations_) {
    if (base >= candidate && base - candidate >= bytes) break;
    candidate = std::max(candidate, up(base + length));
  }
  reservations_.emplace(candidate, bytes);
  return candidate;
}

void WhatIfDevice::release_address_range(int, uintptr_t base, size_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes)
    throw BackendError("what-if device: release of unknown reservation at " +
                       std::to_string(base));
  reservations_.erase(it);
}

bool WhatIfDevice::map_pages(int, uintptr_t, size_t bytes, size_t, StreamId) {
  if (bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

void WhatIfDevice::unmap_pages(int, uintptr_t, size_t bytes, size_t, StreamId) {
  used_ -= bytes;
}

}  // namespace cachealloc
