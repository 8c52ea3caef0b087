#include "lab/whatif_device.h"

#include <algorithm>
#include <string>

#include "allocator/errors.h"

namespace cachealloc {

bool WhatIfDevice::range_free(uintptr_t address, size_t bytes) const {
  const size_t capacity = memory_.capacity();
  if (address < kBase || address % kAlignment != 0 || address - kBase > capacity ||
      bytes > capacity - (address - kBase))
    return false;
  return !memory_.overlaps(address, bytes);
}

uintptr_t WhatIfDevice::allocate(int, size_t bytes, StreamId) {
  if (!memory_.has_room(bytes)) return 0;
  const size_t size = memory_.footprint(bytes);
  const SimulatedMemory::Segments& ranges = memory_.segments();
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
    auto it = ranges.upper_bound(candidate);
    if (it != ranges.begin()) {
      const auto& [addr, length] = *std::prev(it);
      candidate = std::max(candidate, addr + memory_.footprint(length));
    }
    for (; it != ranges.end(); ++it) {
      const auto& [addr, length] = *it;
      if (addr >= candidate && addr - candidate >= size) break;
      candidate = std::max(candidate, addr + memory_.footprint(length));
    }
    const bool fits = candidate + size <= kBase + memory_.capacity();
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
  memory_.add(at, bytes);
  return at;
}

void WhatIfDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = memory_.find(address, bytes);
  if (it == memory_.segments().end())
    throw BackendError("what-if device: release of unknown segment at " +
                       std::to_string(address) + " (" + std::to_string(bytes) + " bytes)");
  it = memory_.remove(it);
  // The gap the release opens or widens: [gap_start, gap_end). A cursor
  // past its start whose size now fits in it must move back to it.
  const uintptr_t gap_end =
      it == memory_.segments().end() ? kBase + memory_.capacity() : it->first;
  uintptr_t gap_start = kBase;
  if (it != memory_.segments().begin()) {
    const auto& [addr, length] = *std::prev(it);
    gap_start = addr + memory_.footprint(length);
  }
  for (FitCursor& c : cursors_)
    if (c.from > gap_start && c.size <= gap_end - gap_start) c.from = gap_start;
}

}  // namespace cachealloc
