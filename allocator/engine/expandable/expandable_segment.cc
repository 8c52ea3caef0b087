#include "allocator/engine/expandable/expandable_segment.h"

#include <algorithm>
#include <iterator>

namespace cachealloc {

ExpandableSegment::Ranges::iterator ExpandableSegment::range_holding(uintptr_t address) {
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return address < it->second.end ? it : ranges_.end();
}

ExpandableSegment::Ranges::iterator ExpandableSegment::range_ending_at(uintptr_t address) {
  auto it = ranges_.lower_bound(address);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return it->second.end == address ? it : ranges_.end();
}

uintptr_t ExpandableSegment::gap_end(uintptr_t address) const {
  const auto it = ranges_.upper_bound(address);
  return it == ranges_.end() ? end() : it->first;
}

Block* ExpandableSegment::last_block(const Range& range) {
  Block* b = range.head;
  while (b->next) b = b->next;
  return b;
}

void ExpandableSegment::mark_cells(uintptr_t start, size_t bytes, bool whole) {
  if (cell_bytes_ == 0) return;
  // The cells [start, start + bytes) covers whole.
  const size_t first = (start - base_ + cell_bytes_ - 1) / cell_bytes_;
  const size_t last = std::min((start + bytes - base_) / cell_bytes_, whole_cells_.size());
  for (size_t c = first; c < last; ++c) whole_cells_[c] = whole;
}

size_t ExpandableSegment::mapped_bytes() const {
  size_t total = 0;
  for (const auto& [start, range] : ranges_) total += range.end - start;
  return total;
}

std::string ExpandableSegment::check() const {
  uintptr_t previous_end = 0;
  for (const auto& [start, range] : ranges_) {
    if (start < base_ || range.end > end() || start >= range.end)
      return "expandable range outside its segment or empty";
    if ((start - base_) % page_bytes_ != 0 || (range.end - base_) % page_bytes_ != 0)
      return "expandable range not on page boundaries";
    if (previous_end != 0 && start <= previous_end)
      return "expandable ranges overlap or touch without being joined";
    previous_end = range.end;
    if (!range.head || range.head->address != start || range.head->prev)
      return "expandable range's head is not its first block";
    uintptr_t at = start;
    for (const Block* b = range.head; b; b = b->next) {
      if (!b->expandable) return "block of an expandable range is not marked expandable";
      if (b->stream != stream_ || b->pool != pool_)
        return "block of an expandable range disagrees on stream or pool";
      if (b->address != at) return "expandable range's blocks do not tile it";
      at += b->size;
    }
    if (at != range.end) return "expandable range's blocks do not cover it";
  }
  for (size_t c = 0; c < whole_cells_.size(); ++c) {
    if (!whole_cells_[c]) continue;
    const uintptr_t cell = base_ + c * cell_bytes_;
    auto it = ranges_.upper_bound(cell);
    if (it == ranges_.begin() || std::prev(it)->second.end < cell + cell_bytes_)
      return "expandable cell mapped as one handle lies outside the mapped ranges";
  }
  return "";
}

}  // namespace cachealloc
