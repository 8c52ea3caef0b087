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

void ExpandableSegment::note_mapped(uintptr_t start, PageCells cells) {
  if (cell_page_.empty() || cells.count == 0) return;
  const size_t per = cell_bytes_ / page_bytes_;
  size_t i = (start - base_) / page_bytes_;
  for (size_t c = 0; c < cells.count; ++c)
    for (size_t k = 1; k <= per; ++k) cell_page_[i++] = static_cast<uint8_t>(k);
  cell_pages_marked_ += cells.count * per;
}

void ExpandableSegment::note_unmapped(uintptr_t start, size_t bytes) {
  if (cell_page_.empty()) return;
  const size_t i = (start - base_) / page_bytes_;
  for (size_t k = i; k < i + bytes / page_bytes_; ++k) {
    cell_pages_marked_ -= cell_page_[k] != 0;
    cell_page_[k] = 0;
  }
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
  if (!cell_page_.empty()) {
    // Inside the ranges, cells run 1..per in order; outside, nothing is
    // marked (counted: the marks inside must be all of them).
    const size_t per = cell_bytes_ / page_bytes_;
    size_t inside = 0;
    for (const auto& [start, range] : ranges_) {
      size_t expect = 0;  // the next page's place in a cell, 0 outside one
      for (uintptr_t p = start; p < range.end; p += page_bytes_) {
        const size_t k = cell_page(p);
        inside += k != 0;
        if (k != (expect ? expect : (k == 1 ? 1 : 0)))
          return "expandable cell mapped as one handle is cut or out of order";
        expect = k == 0 || k == per ? 0 : k + 1;
      }
      if (expect != 0) return "expandable cell mapped as one handle runs past its range";
    }
    if (inside != cell_pages_marked_)
      return "expandable cell mapped as one handle lies outside the mapped ranges";
  }
  return "";
}

}  // namespace cachealloc
