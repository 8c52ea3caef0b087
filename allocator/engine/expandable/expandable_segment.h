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
//     every page of a cell mapped as one handle lies inside a mapped range,
//     and a cell's pages are marked 1..cell_bytes/page_bytes in order.
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

#include "allocator/base/page_handles.h"
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
  // page_bytes above it, at most 255 pages (page_handles.h): the size of
  // the cells this segment's mappings may start with. Throws std::bad_alloc.
  ExpandableSegment(uintptr_t base, size_t bytes, size_t page_bytes, StreamId stream,
                    BlockPool* pool, size_t cell_bytes = 0)
      : base_(base),
        bytes_(bytes),
        page_bytes_(page_bytes),
        cell_bytes_(cell_bytes),
        stream_(stream),
        pool_(pool),
        cell_page_(cell_bytes ? bytes / page_bytes : 0, 0) {}

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
    const size_t k = cell_page(p);
    return k > 1 ? p + (cell_bytes_ / page_bytes_ - (k - 1)) * page_bytes_ : p;
  }
  uintptr_t handle_down(uintptr_t address) const {
    const uintptr_t p = page_down(address);
    const size_t k = cell_page(p);
    return k > 1 ? p - (k - 1) * page_bytes_ : p;
  }
  // After a mapping at `start` that began with `cells` (of cell_bytes()):
  // marks their pages, as the backend made them. After an unmapping of
  // [start, start + bytes) (handle boundaries): clears them. No allocation.
  void note_mapped(uintptr_t start, PageCells cells);
  void note_unmapped(uintptr_t start, size_t bytes);

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
  // For the page at `address` (a page boundary): 0 when it is its own
  // handle (or unmapped, or past the end), else its place in its cell, 1 for
  // the cell's first page.
  size_t cell_page(uintptr_t address) const {
    const size_t i = (address - base_) / page_bytes_;
    return i < cell_page_.size() ? cell_page_[i] : 0;
  }

  const uintptr_t base_;
  const size_t bytes_;       // reserved: whole pages
  const size_t page_bytes_;  // 2 MiB (small pool) or 20 MiB (large pool)
  const size_t cell_bytes_;  // 0, or the cells' size (page_handles.h)
  const StreamId stream_;
  BlockPool* const pool_;
  Ranges ranges_;
  // Per page from base_ (only with cells): cell_page()'s value. Sized once.
  std::vector<uint8_t> cell_page_;
  size_t cell_pages_marked_ = 0;  // pages of cell_page_ not 0
};

}  // namespace cachealloc
