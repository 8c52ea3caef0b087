// One expandable segment (native's ExpandableSegment, expandable_segments:True):
// a reserved range of virtual addresses, of which whole pages are mapped to
// physical memory on demand and unmapped again when free.
//
// Representation. Native keeps the unmapped parts as Blocks in the segment's
// chain (flagged unmapped) and reports one snapshot segment per contiguous
// mapped range. Here the unmapped parts are not Blocks: each maximal mapped
// range [start, end) is a chain of its own (head.prev == nullptr, last.next
// == nullptr), its head is a segment head of the engine, and the gaps
// between ranges are implicit. So the cache-hit path (split, merge with
// free neighbours) needs no "mapped" test: a chain never crosses a gap.
// What native reads from an unmapped neighbour (the gap after a range, to
// grow into it) is computed from the ranges.
//
// Invariants (check() and DeviceCachingAllocator::check_invariants):
//   - ranges lie in [base, end()), start and end on page boundaries, are
//     ordered and separated by gaps of at least one page (touching ranges
//     are joined when the page between them is mapped);
//   - each range's chain tiles it exactly; its blocks are expandable and
//     share the segment's stream and pool;
//   - mapped_bytes() == sum of range sizes; the engine's reserved bytes
//     count them (and no gap);
//   - with cells (cell_bytes() > 0, a policy's choice: page_handles.h),
//     every cell marked as one handle lies inside one mapped range.
// Handles: pages are mapped as page_handles.h lays them out (one physical
// handle per page, or per whole cell of a mapping); an unmapping must not
// cut a handle, so its ends are handle_up / handle_down of the free
// block's ends, not page_up / page_down.
// Units: bytes and addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"

namespace cachealloc {

class ExpandableSegment {
 public:
  // A maximal mapped range: [start (the map key), end), blocks from head.
  struct Range {
    uintptr_t end = 0;
    Block* head = nullptr;
  };
  using Ranges = std::map<uintptr_t, Range>;

  // cell_bytes: 0 (one handle per page, native) or a multiple of
  // page_bytes above it (page_handles.h). Throws std::bad_alloc.
  ExpandableSegment(uintptr_t base, size_t bytes, size_t page_bytes, StreamId stream,
                    BlockPool* pool, size_t cell_bytes = 0)
      : base_(base),
        bytes_(bytes),
        page_bytes_(page_bytes),
        cell_bytes_(cell_bytes),
        stream_(stream),
        pool_(pool),
        whole_cells_(cell_bytes ? bytes / cell_bytes : 0, false) {}

  uintptr_t base() const { return base_; }
  uintptr_t end() const { return base_ + bytes_; }
  size_t bytes() const { return bytes_; }
  size_t page_bytes() const { return page_bytes_; }
  size_t cell_bytes() const { return cell_bytes_; }
  StreamId stream() const { return stream_; }
  BlockPool* pool() const { return pool_; }
  bool contains(uintptr_t address) const { return address >= base_ && address < end(); }

  // Page boundaries at or below / at or above `address` (inside the segment).
  uintptr_t page_down(uintptr_t address) const {
    return base_ + (address - base_) / page_bytes_ * page_bytes_;
  }
  uintptr_t page_up(uintptr_t address) const {
    return base_ + (address - base_ + page_bytes_ - 1) / page_bytes_ * page_bytes_;
  }

  // Handle boundaries at or above / at or below `address`: page_up /
  // page_down, moved to the cell's end / start when that lands strictly
  // inside a cell mapped as one handle. [handle_up(a), handle_down(b)) is
  // what can be unmapped of a free run [a, b). O(1).
  uintptr_t handle_up(uintptr_t address) const {
    const uintptr_t p = page_up(address);
    const size_t cell = cell_holding(p);
    return cell != kNoCell ? base_ + (cell + 1) * cell_bytes_ : p;
  }
  uintptr_t handle_down(uintptr_t address) const {
    const uintptr_t p = page_down(address);
    const size_t cell = cell_holding(p);
    return cell != kNoCell ? base_ + cell * cell_bytes_ : p;
  }
  // After a mapping of [start, start + bytes) (whole pages): marks the cells
  // it covers whole as one handle each, as the backend made them. After an
  // unmapping of it (handle boundaries): clears them. No allocation.
  void note_mapped(uintptr_t start, size_t bytes) { mark_cells(start, bytes, true); }
  void note_unmapped(uintptr_t start, size_t bytes) { mark_cells(start, bytes, false); }

  const Ranges& ranges() const { return ranges_; }
  Ranges& ranges() { return ranges_; }
  // A node for a new range, made ahead of a step that must not fail once
  // the device has mapped or unmapped pages: ranges().insert(std::move(
  // node)) allocates nothing. Set its key() and mapped() first. Throws
  // std::bad_alloc.
  static Ranges::node_type spare_range_node() {
    Ranges scratch;
    scratch.emplace(0, Range{});
    return scratch.extract(scratch.begin());
  }
  // The range holding `address`, or ranges().end().
  Ranges::iterator range_holding(uintptr_t address);
  // The range that ends exactly at `address`, or ranges().end().
  Ranges::iterator range_ending_at(uintptr_t address);
  // End of the gap that starts at `address` (an unmapped address): the next
  // range's start, or end().
  uintptr_t gap_end(uintptr_t address) const;
  // The last block of a range's chain. O(blocks in the range).
  static Block* last_block(const Range& range);
  size_t mapped_bytes() const;

  // Empty when the invariants above hold, else what is broken.
  std::string check() const;

 private:
  static constexpr size_t kNoCell = ~size_t{0};
  // The cell mapped as one handle that holds `address` strictly inside
  // (not at its start), or kNoCell.
  size_t cell_holding(uintptr_t address) const {
    if (cell_bytes_ == 0 || address < base_) return kNoCell;
    const size_t cell = (address - base_) / cell_bytes_;
    return cell < whole_cells_.size() && whole_cells_[cell] &&
                   (address - base_) % cell_bytes_ != 0
               ? cell
               : kNoCell;
  }
  void mark_cells(uintptr_t start, size_t bytes, bool whole);

  const uintptr_t base_;
  const size_t bytes_;       // reserved: whole pages
  const size_t page_bytes_;  // 2 MiB (small pool) or 20 MiB (large pool)
  const size_t cell_bytes_;  // 0, or the cells' size (page_handles.h)
  const StreamId stream_;
  BlockPool* const pool_;
  Ranges ranges_;
  // Per cell of cell_bytes_ from base_: mapped as one handle. Sized once.
  std::vector<bool> whole_cells_;
};

}  // namespace cachealloc
