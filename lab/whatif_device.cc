#include "lab/whatif_device.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace cachealloc {

bool WhatIfDevice::range_free(uintptr_t address, size_t bytes) const {
  const size_t capacity = memory_.capacity();
  if (address < kBase || address % kAlignment != 0 || address - kBase > capacity ||
      bytes > capacity - (address - kBase))
    return false;
  return !memory_.overlaps(address, bytes);
}

SegmentPlacement parse_segment_placement(const std::string& text) {
  if (text == "first-fit") return SegmentPlacement::kFirstFit;
  if (text == "top-down") return SegmentPlacement::kTopDown;
  const std::string prefix = "shuffled:";
  if (text.rfind(prefix, 0) == 0) {
    // Canonical digits only (no sign, no leading zero), so the name a row
    // carries (segment_placement_name) is the text the caller gave.
    const std::string digits = text.substr(prefix.size());
    if (!digits.empty() && digits.size() <= 18 &&
        digits.find_first_not_of("0123456789") == std::string::npos &&
        (digits.size() == 1 || digits[0] != '0'))
      return SegmentPlacement(SegmentPlacement::kShuffled, std::stoull(digits));
    throw std::invalid_argument("segment placement '" + text +
                                "': the seed after 'shuffled:' must be a decimal integer of "
                                "at most 18 digits, without leading zeros");
  }
  throw std::invalid_argument("unknown segment placement '" + text +
                              "' (known: first-fit, top-down, shuffled:SEED)");
}

std::string segment_placement_name(SegmentPlacement placement) {
  switch (placement.kind) {
    case SegmentPlacement::kTopDown: return "top-down";
    case SegmentPlacement::kShuffled: return "shuffled:" + std::to_string(placement.seed);
    default: return "first-fit";
  }
}

WhatIfDevice::WhatIfDevice(size_t capacity, SegmentPlacement placement)
    : SimulatedBackend("what-if device", capacity / kAlignment * kAlignment, kAlignment),
      placement_(placement),
      random_state_(placement.seed) {
  memory_.hold_events(true);
}

uintptr_t WhatIfDevice::allocate(int, size_t bytes, StreamId) {
  if (!memory_.has_room(bytes)) return 0;
  const size_t size = memory_.footprint(bytes);
  uintptr_t at = 0;
  if (hint_address_ != 0 && hint_bytes_ == bytes && range_free(hint_address_, size)) {
    at = hint_address_;
    ++hints_taken_;
  } else {
    switch (placement_.kind) {
      case SegmentPlacement::kTopDown: at = top_down(size); break;
      case SegmentPlacement::kShuffled: at = shuffled(size); break;
      default: at = first_fit(size);
    }
    if (at == 0) return 0;  // fragmented
  }
  hint_address_ = 0;
  memory_.add_segment(at, bytes);
  return at;
}

uintptr_t WhatIfDevice::top_down(size_t size) const {
  // Gaps from the device's end downward: [previous segment's end, gap_end).
  // Segments and the end are on the grid and `size` is a footprint, so the
  // answer is too. O(segments) per call; device calls are rare.
  const SimulatedMemory::Extents& segments = memory_.segments();
  uintptr_t gap_end = kBase + memory_.capacity();
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    const uintptr_t gap_start = it->first + memory_.footprint(it->second);
    if (gap_end >= gap_start && gap_end - gap_start >= size) return gap_end - size;
    gap_end = it->first;
  }
  return gap_end - kBase >= size ? gap_end - size : 0;
}

uintptr_t WhatIfDevice::shuffled(size_t size) {
  // Uniform over the 2 MiB slots where the segment would end inside the
  // device. The device is 1 TiB in a replay (a limit is the engine's), so a
  // try overlaps a segment with a chance of reserved / 1 TiB: the tries
  // almost never run out, and when they do, first fit keeps it
  // deterministic. Placing a segment only shrinks gaps, so first fit's
  // cursors stay valid (no gap of their size below them).
  const size_t capacity = memory_.capacity();
  if (size > capacity) return 0;
  const uint64_t slots = (capacity - size) / kAlignment + 1;
  for (int i = 0; i < kShuffleTries; ++i) {
    // splitmix64: a full-period 64-bit sequence from any seed.
    uint64_t z = (random_state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const uintptr_t at = kBase + (z % slots) * kAlignment;
    if (!memory_.overlaps(at, size)) return at;
  }
  return first_fit(size);
}

uintptr_t WhatIfDevice::first_fit(size_t size) {
  // First fit, as SimulatedDevice: the lowest gap that holds `size`,
  // searched from the furthest cursor that applies (no gap of `size`
  // bytes starts below it).
  uintptr_t start = kBase;
  for (const FitCursor& c : cursors_)
    if (c.size <= size) start = std::max(start, c.from);
  // Reservations lie above kBase + 2 x capacity: the search meets none
  // before it passes the device's end.
  const uintptr_t candidate = memory_.first_fit(start, size, 1);
  const bool fits = candidate != 0 && candidate + size <= kBase + memory_.capacity();
  // Every gap below `candidate` is smaller than `size`; placing the
  // segment there moves that bound past it.
  const uintptr_t from = fits ? candidate + size : candidate;
  auto same = std::find_if(cursors_.begin(), cursors_.end(),
                           [size](const FitCursor& c) { return c.size == size; });
  if (same != cursors_.end()) cursors_.erase(same);
  else if (cursors_.size() == kMaxCursors) cursors_.erase(cursors_.begin());
  cursors_.push_back(FitCursor{size, from});
  return fits ? candidate : 0;
}

void WhatIfDevice::release(int device, uintptr_t address, size_t bytes) {
  SimulatedBackend::release(device, address, bytes);
  // The gap the release opens or widens: [gap_start, gap_end). A cursor
  // past its start whose size now fits in it must move back to it.
  const SimulatedMemory::Extents& segments = memory_.segments();
  const auto next = segments.upper_bound(address);
  const uintptr_t gap_end = next == segments.end() ? kBase + memory_.capacity() : next->first;
  uintptr_t gap_start = kBase;
  if (next != segments.begin()) {
    const auto& [addr, length] = *std::prev(next);
    gap_start = addr + memory_.footprint(length);
  }
  for (FitCursor& c : cursors_)
    if (c.from > gap_start && c.size <= gap_end - gap_start) c.from = gap_start;
}

uintptr_t WhatIfDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  return memory_.reserve_first_fit(kBase + 2 * memory_.capacity(), bytes, alignment);
}

}  // namespace cachealloc
