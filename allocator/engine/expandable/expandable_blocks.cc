// ExpandableBlocks (expandable_blocks.h): the blocks of expandable
// segments, native's steps over expandable_segment.h's representation.
#include "allocator/engine/expandable/expandable_blocks.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/page_handles.h"
#include "allocator/engine/blocks/best_fit.h"
#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/pools/private_pool.h"

namespace cachealloc {
namespace {

// native: kSmallBuffer for the small pool, large_segment_size for the large
// pool, fixed when the segment is created (a later settings call changes
// only the segments created after it).
size_t page_bytes_for(const BlockPool& pool, const AllocatorConfig& config) {
  return pool.is_small() ? kSmallBuffer : config.large_segment_size;
}

// The cells a large-pool segment's mappings start with (a policy's choice,
// AllocatorConfig::large_cell_bytes; page_handles.h), or 0: one handle per
// page, native. Fixed when the segment is created, as its page.
size_t cell_bytes_for(const BlockPool& pool, const AllocatorConfig& config) {
  const size_t cell = config.large_cell_bytes, page = config.large_segment_size;
  if (pool.is_small() || !valid_cells(cell, page, {cell, 1}) || cell / page > 255) return 0;
  return cell;
}

// A step along an expandable segment in address order: a mapped Block, or
// the gap (unmapped run) that starts at `gap`.
struct Piece {
  Block* block = nullptr;
  uintptr_t gap = 0;
  bool valid() const { return block != nullptr || gap != 0; }
};

}  // namespace

ExpandableSegment* ExpandableBlocks::segment_of(uintptr_t address) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), address,
                             [](uintptr_t a, const auto& s) { return a < s->base(); });
  if (it == segments_.begin()) return nullptr;
  ExpandableSegment* seg = std::prev(it)->get();
  return seg->contains(address) ? seg : nullptr;
}

size_t ExpandableBlocks::unmapped_after(const Block* b) const {
  if (!b->expandable || b->next) return 0;
  const ExpandableSegment* seg = segment_of(b->address);
  const uintptr_t end = b->address + b->size;
  return end < seg->end() ? seg->gap_end(end) - end : 0;
}

// native: get_free_block, with expandable blocks in the pool.
BlockPool::iterator ExpandableBlocks::find_free_block(BlockPool& pool, StreamId stream,
                                                     size_t size,
                                                     const AllocatorConfig& config) const {
  auto it = pool.lower_bound(stream, size);
  if (BlockPool::is_end(it) || it->stream != stream) return pool.end();
  if (it->block->expandable) {
    if (on_) {
      // Best fit by the size a block can grow to (its own plus the gap
      // after it): larger blocks that would grow less come first.
      auto grown = [this](const Block* b) { return b->size + unmapped_after(b); };
      auto next = it;
      ++next;
      while (it->block->expandable && !BlockPool::is_end(next) && next->stream == stream &&
             grown(next->block) < grown(it->block)) {
        it = next;
        ++next;
      }
    } else {
      // Turned off: free blocks of expandable segments are not reused.
      do {
        ++it;
      } while (!BlockPool::is_end(it) && it->block->expandable && it->stream == stream);
      if (BlockPool::is_end(it) || it->stream != stream) return pool.end();
    }
  }
  if (oversize_rules_refuse(size, it->size, config)) return pool.end();
  return it;
}

// native: find_expandable_block and try_allocate_expandable_block.
Block* ExpandableBlocks::allocate(BlockPool& pool, StreamId stream, size_t size,
                                  const AllocatorConfig& config, const ContextPtr& ctx,
                                  OnPages on_pages, MayMap may_map) {
  ExpandableSegment* seg = nullptr;
  Piece candidate;

  auto bytes_of = [&](const ExpandableSegment& s, const Piece& p) {
    return p.block ? p.block->size : s.gap_end(p.gap) - p.gap;
  };
  // The piece after `p` in its segment, or an invalid one at its end.
  auto next_piece = [&](const ExpandableSegment& s, const Piece& p) {
    if (p.block) {
      if (p.block->next) return Piece{p.block->next, 0};
      const uintptr_t end = p.block->address + p.block->size;
      return end < s.end() ? Piece{nullptr, end} : Piece{};
    }
    const uintptr_t end = s.gap_end(p.gap);
    if (end >= s.end()) return Piece{};
    return Piece{s.ranges().at(end).head, 0};
  };
  // Free blocks and gaps can be handed out; a walk from `p` over them
  // finds `size` bytes.
  auto has_room = [&](const ExpandableSegment& s, Piece p) {
    size_t bytes = 0;
    while (bytes < size && p.valid() && (!p.block || p.block->is_free())) {
      bytes += bytes_of(s, p);
      p = next_piece(s, p);
    }
    return bytes >= size;
  };
  // The stream's gaps of this pool in address order (native walks its
  // unmapped blocks so); from the free block just below a gap if there is
  // one. The lowest that has room wins.
  for (const auto& owned : segments_) {
    ExpandableSegment& s = *owned;
    if (s.pool() != &pool || s.stream() != stream) continue;
    uintptr_t at = s.base();
    for (auto it = s.ranges().begin();; ++it) {
      const uintptr_t gap_end = it == s.ranges().end() ? s.end() : it->first;
      if (at < gap_end) {
        Piece c{nullptr, at};
        if (at != s.base()) {
          Block* below = ExpandableSegment::last_block(std::prev(it)->second);
          if (below->is_free()) c = Piece{below, 0};
        }
        if (has_room(s, c)) {
          seg = &s;
          candidate = c;
          break;
        }
      }
      if (it == s.ranges().end()) break;
      at = it->second.end;
    }
    if (seg) break;
  }

  if (!seg) {
    // A new segment: address space for 1 1/8 of the device's memory, in
    // whole pages, so pages unmapped early can be mapped again at its end.
    const size_t page = page_bytes_for(pool, config);
    const size_t total = backend_.memory_info(device_).total_bytes;
    const size_t bytes = (total + total / 8 + page - 1) / page * page;
    segments_.reserve(segments_.size() + 1);
    const uintptr_t base = backend_.reserve_address_range(device_, bytes, page);
    std::unique_ptr<ExpandableSegment> owned;
    try {
      owned = std::make_unique<ExpandableSegment>(base, bytes, page, stream, &pool,
                                                  cell_bytes_for(pool, config));
    } catch (...) {
      backend_.release_address_range(device_, base, bytes);
      throw;
    }
    seg = owned.get();
    auto pos = std::upper_bound(segments_.begin(), segments_.end(), base,
                                [](uintptr_t a, const auto& s) { return a < s->base(); });
    segments_.insert(pos, std::move(owned));
    candidate = Piece{nullptr, base};
  }

  Block* block = candidate.block;
  if (!block) {
    block = map_gap(*seg, candidate.gap, std::min(bytes_of(*seg, candidate), size), ctx,
                    on_pages, may_map);
    if (!block) return nullptr;
  }
  while (block->size < size) {
    // A free block that ends its range, followed by a gap: grow into it.
    const uintptr_t gap = block->address + block->size;
    block = map_gap(*seg, gap, std::min(size - block->size, seg->gap_end(gap) - gap), ctx,
                    on_pages, may_map);
    if (!block) return nullptr;
  }
  // A std::bad_alloc here leaves the grown block cached, as a refusal does.
  recycler_.reserve_one();  // alloc_found_block's remainder (engine: prepare_unindexed_block)
  block->pool->reserve_for_insert();
  block->pool->erase(block);
  return block;
}

// native: map_block.
Block* ExpandableBlocks::map_gap(ExpandableSegment& seg, uintptr_t start, size_t bytes,
                                 const ContextPtr& ctx, OnPages on_pages, MayMap may_map) {
  const size_t page = seg.page_bytes();
  const size_t mapped = (bytes + page - 1) / page * page;
  // A policy may refuse the mapping or give pages back elsewhere first
  // (before anything below is taken or reserved).
  bool use_cells = seg.cell_bytes() != 0;
  if (!may_map(seg, start, mapped, &use_cells)) return nullptr;
  // The request's block covers [start, start + bytes) of this mapping (and
  // what lies below it): with cells, the whole cells inside that run are
  // one handle each, from `start`; the pages of the block's ragged end stay
  // handles of their own (page_handles.h). A free run that later holds the
  // whole block unmaps them all; a cell is never cut by the block's end.
  const PageCells cells =
      use_cells ? PageCells{seg.cell_bytes(), bytes / seg.cell_bytes()} : PageCells{};
  // Host memory first, so nothing below the device call can throw: the
  // Block, a segment head's room, index nodes, and the node of a new range
  // (none when the pages extend the range that ends at `start`).
  BlockPool& pool = *seg.pool();
  auto& ranges = seg.ranges();
  const auto left = seg.range_ending_at(start);
  ExpandableSegment::Ranges::node_type new_range;
  Block* n = recycler_.take();
  try {
    segment_heads_.reserve_one();
    pool.reserve_for_insert();
    if (left == ranges.end()) new_range = ExpandableSegment::spare_range_node();
  } catch (...) {
    recycler_.give_back_unused(n);
    throw;
  }
  bool ok;
  try {
    ok = backend_.map_pages(device_, start, mapped, page, cells, seg.stream());
  } catch (...) {
    recycler_.give_back_unused(n);
    throw;
  }
  if (!ok) {
    recycler_.give_back_unused(n);
    return nullptr;
  }
  seg.note_mapped(start, cells);
  const size_t ranges_before = ranges.size();
  n->address = start;
  n->size = mapped;
  n->requested_size = 0;
  n->stream = seg.stream();
  n->pool = &pool;
  n->prev = nullptr;
  n->next = nullptr;
  n->gc_count_base = 0;
  n->expandable = true;

  // Link into the range that ends at `start`, or start a range; join the
  // range that starts right after.
  ExpandableSegment::Range* range;
  if (left != ranges.end()) {
    Block* last = ExpandableSegment::last_block(left->second);
    last->next = n;
    n->prev = last;
    left->second.end = start + mapped;
    range = &left->second;
  } else {
    new_range.key() = start;
    new_range.mapped() = ExpandableSegment::Range{start + mapped, n};
    range = &ranges.insert(std::move(new_range)).position->second;
    segment_heads_.insert(n);
  }
  if (auto right = ranges.find(start + mapped); right != ranges.end()) {
    Block* head = right->second.head;
    n->next = head;
    head->prev = n;
    segment_heads_.erase(head);
    head->context_when_segment_allocated = nullptr;
    range->end = right->second.end;
    ranges.erase(right);
  }
  // Native records the mapping's context as the segment's only for a block
  // at the segment's start.
  if (start == seg.base() && !n->context_when_segment_allocated)
    n->context_when_segment_allocated = ctx;

  // native: try_merge_blocks with the lower, then the upper neighbour.
  Block* merged = n;
  auto absorb = [&](Block* lower, Block* upper) {
    lower->size += upper->size;
    lower->next = upper->next;
    if (lower->next) lower->next->prev = lower;
    upper->expandable = false;
    recycler_.recycle(upper);
  };
  if (n->prev && n->prev->is_free()) {
    merged = n->prev;
    pool.erase(merged);
    absorb(merged, n);
  }
  if (merged->next && merged->next->is_free()) {
    pool.erase(merged->next);
    absorb(merged, merged->next);
  }
  pool.insert(merged);

  if (PrivatePool* owner = pool.owner())
    owner->segment_count += static_cast<int>(ranges.size()) - static_cast<int>(ranges_before);
  on_pages({EventKind::kSegmentMap, &pool, seg.stream(), start, mapped, &ctx});
  return merged;
}

// native: unmap_block, then release_expandable_segment once nothing is
// mapped.
void ExpandableBlocks::unmap(Block* b, const ContextPtr& ctx, OnPages on_pages,
                             EmptySegment empty) {
  ExpandableSegment& seg = *segment_of(b->address);
  // Whole handles only (a handle cannot be split): whole pages, or whole
  // cells where a cell was mapped as one handle.
  const uintptr_t begin = seg.handle_up(b->address);
  const uintptr_t end = seg.handle_down(b->address + b->size);
  if (begin >= end) return;
  BlockPool& pool = *b->pool;
  const size_t ranges_before = seg.ranges().size();
  auto& ranges = seg.ranges();
  const auto range = seg.range_holding(b->address);
  const uintptr_t range_start = range->first;
  const uintptr_t range_end = range->second.end;
  Block* const range_head = range->second.head;
  Block* const after_next = b->next;
  const size_t before = begin - b->address;
  const size_t after = b->address + b->size - end;

  // Host memory first: the new block, index nodes for the two blocks left
  // on either side, a segment head's room and the node of the range above
  // the hole (the range's own node serves the one below), before the device
  // call; nothing after it can throw.
  Block* tail = after > 0 ? recycler_.take() : nullptr;
  ExpandableSegment::Ranges::node_type upper_range;
  try {
    segment_heads_.reserve_one();
    pool.reserve_for_inserts(2);
    if (tail || after_next) upper_range = ExpandableSegment::spare_range_node();
  } catch (...) {
    if (tail) recycler_.give_back_unused(tail);
    throw;
  }
  ContextPtr event_ctx = ctx ? ctx : b->context_when_segment_allocated;
  try {
    backend_.unmap_pages(device_, begin, end - begin, seg.page_bytes(), seg.cell_bytes(),
                         seg.stream());
  } catch (...) {
    if (tail) recycler_.give_back_unused(tail);
    throw;
  }
  seg.note_unmapped(begin, end - begin);

  pool.erase(b);
  // Below the hole: b keeps [b, begin), or goes.
  Block* lower_last = nullptr;
  if (before > 0) {
    b->size = before;
    b->next = nullptr;
    pool.insert(b);
    lower_last = b;
  } else {
    lower_last = b->prev;
    if (lower_last) lower_last->next = nullptr;
  }
  // Above the hole: a new free block [end, b's end), or b's upper neighbour
  // starts the upper range.
  Block* upper_head = nullptr;
  if (tail) {
    tail->address = end;
    tail->size = after;
    tail->requested_size = 0;
    tail->stream = b->stream;
    tail->pool = &pool;
    tail->prev = nullptr;
    tail->next = after_next;
    tail->gc_count_base = 0;
    tail->expandable = true;
    if (after_next) after_next->prev = tail;
    pool.insert(tail);
    upper_head = tail;
  } else if (after_next) {
    after_next->prev = nullptr;
    upper_head = after_next;
  }
  if (before == 0) {
    if (b == range_head) segment_heads_.erase(b);
    b->expandable = false;
    recycler_.recycle(b);
  }
  auto lower_range = ranges.extract(range_start);
  if (lower_last) {
    lower_range.mapped() = ExpandableSegment::Range{begin, range_head};
    ranges.insert(std::move(lower_range));
  }
  if (upper_head) {
    upper_range.key() = end;
    upper_range.mapped() = ExpandableSegment::Range{range_end, upper_head};
    ranges.insert(std::move(upper_range));
    segment_heads_.insert(upper_head);
  }

  if (PrivatePool* owner = pool.owner())
    owner->segment_count += static_cast<int>(ranges.size()) - static_cast<int>(ranges_before);
  on_pages({EventKind::kSegmentUnmap, &pool, seg.stream(), begin, end - begin, &event_ctx});
  if (ranges.empty() && empty == EmptySegment::kRelease) release(&seg);
}

// native: release_expandable_segment.
void ExpandableBlocks::release(ExpandableSegment* seg) {
  backend_.release_address_range(device_, seg->base(), seg->bytes());
  std::erase_if(segments_, [seg](const auto& s) { return s.get() == seg; });
}

void ExpandableBlocks::release_unmapped(const BlockPool& pool) {
  std::vector<ExpandableSegment*> empty;
  for (const auto& s : segments_)
    if (s->pool() == &pool && s->ranges().empty()) empty.push_back(s.get());
  for (ExpandableSegment* s : empty) release(s);
}

void ExpandableBlocks::check() const {
  uintptr_t previous_end = 0;
  size_t ranges = 0;
  for (const auto& seg : segments_) {
    if (seg->base() < previous_end)
      throw InvariantViolation("expandable segments overlap or are out of order");
    previous_end = seg->end();
    if (std::string broken = seg->check(); !broken.empty())
      throw InvariantViolation("invariant broken: " + broken);
    for (const auto& [start, range] : seg->ranges())
      if (!segment_heads_.contains(range.head))
        block_invariant_broken("expandable range's head is not a segment head", range.head);
    ranges += seg->ranges().size();
  }
  size_t expandable_heads = 0;
  for (const Block* head : segment_heads_) expandable_heads += head->expandable;
  if (expandable_heads != ranges)
    throw InvariantViolation("expandable segment heads differ from the mapped ranges");
}

}  // namespace cachealloc
