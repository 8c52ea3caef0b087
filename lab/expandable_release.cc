// Giving memory back under the expandable segments policy (empty_cache and
// the OOM retry path unmap whole free pages), cross-stream events, and the
// read-only views.
#include <string>

#include "absl/container/flat_hash_map.h"
#include "allocator/errors.h"
#include "allocator/segment_views.h"
#include "allocator/size_policy.h"
#include "allocator/stream_event_queues.h"
#include "lab/expandable_allocator.h"

namespace cachealloc {

void ExpandableSegmentsAllocator::empty_cache(const ContextPtr& ctx) {
  release_cached_blocks(ctx);
}

// native: release_cached_blocks (default pools)
bool ExpandableSegmentsAllocator::release_cached_blocks(const ContextPtr& ctx) {
  synchronize_and_free_events(ctx);
  release_blocks(large_blocks_, ctx);
  release_blocks(small_blocks_, ctx);
  return true;
}

// native: release_blocks, expandable branch. Every free mapped block gives
// back its whole pages; a segment left entirely unmapped is dropped.
void ExpandableSegmentsAllocator::release_blocks(BlockPool& pool, const ContextPtr& ctx) {
  // Unmapping edits the pool: gather first. Merges only ever absorb
  // unmapped blocks, so no gathered (mapped) block is deleted on the way.
  std::vector<Block*> to_unmap;
  to_unmap.reserve(pool.size());
  for (const auto& e : pool.entries()) to_unmap.push_back(e.block);
  for (Block* b : to_unmap) {
    unmap_block(b, ctx);
    if (!is_mapped(b) && !b->prev && !b->next) release_segment(b);
  }
}

// native: unmap_block. Unmaps the pages that lie wholly inside the free
// block; the partial pages at either end stay mapped as free blocks.
void ExpandableSegmentsAllocator::unmap_block(Block* block, const ContextPtr& ctx) {
  VirtualSegment& seg = segment_of(block);
  const size_t page = seg.page_bytes;
  const size_t offset = block->address - seg.base;
  const size_t first = (offset + page - 1) / page;
  const size_t last = (offset + block->size) / page;
  if (first >= last) return;
  for (auto it = seg.pages.lower_bound(first); it != seg.pages.end() && it->first < last;) {
    backend_.release(device_, it->second, page);
    it = seg.pages.erase(it);
  }
  BlockPool& mapped = *block->pool;
  mapped.erase(block);
  const uintptr_t start = seg.base + first * page;
  const size_t bytes = (last - first) * page;

  // The partial pages at either end stay mapped, as free blocks of their own:
  // prev -> before -> block -> after -> next, block = [start, start + bytes).
  if (start > block->address) mapped.insert(split_off_front(block, start - block->address, mapped));
  if (block->size > bytes) mapped.insert(split_off_tail(block, bytes, mapped));
  block->requested_size = 0;
  block->pool = &unmapped_pool(seg.is_small);
  try_merge_blocks(block, block->prev);
  try_merge_blocks(block, block->next);
  block->pool->insert(block);
  reserved_bytes_ -= bytes;
  emit_mapping(EngineEventKind::kSegmentFree, seg, start, bytes,
               ctx ? &ctx : &block->context_when_segment_allocated);
}

// native: release_expandable_segment. `whole` spans its segment, unmapped.
void ExpandableSegmentsAllocator::release_segment(Block* whole) {
  const uintptr_t base = segment_of(whole).base;
  whole->pool->erase(whole);
  segments_.erase(base);
  delete_block(whole);
}

// native: insert_events
void ExpandableSegmentsAllocator::insert_events(Block* block) {
  insert_stream_events(events_, [this]() -> DeviceBackend& { return backend_; }, device_, block);
}

// native: process_events
void ExpandableSegmentsAllocator::process_events(const ContextPtr& ctx) {
  free_blocks_of_completed_events(events_, [this]() -> DeviceBackend& { return backend_; },
                                  [this, &ctx](Block* block) { free_block(block, ctx); });
}

// native: synchronize_and_free_events
void ExpandableSegmentsAllocator::synchronize_and_free_events(const ContextPtr& ctx) {
  EngineEvent e{EngineEventKind::kSyncAllStreams};
  emit(e);
  synchronize_and_free_all_events(events_, [this]() -> DeviceBackend& { return backend_; },
                                  [this, &ctx](Block* block) { free_block(block, ctx); });
}

std::vector<SegmentView> ExpandableSegmentsAllocator::segments() const {
  // A view starts at a mapped block whose predecessor is absent or unmapped,
  // and ends before the next unmapped block.
  std::vector<const Block*> heads;
  auto consider = [&](const Block* b) {
    if (!b->prev || !is_mapped(b->prev)) heads.push_back(b);
  };
  for (const BlockPool* pool : {&large_blocks_, &small_blocks_})
    for (const auto& e : pool->entries()) consider(e.block);
  for (const Block* b : active_blocks_) consider(b);
  return segment_views(device_, std::move(heads), [this](const Block* b) { return is_mapped(b); });
}

namespace {
[[noreturn]] void violated(const std::string& what, const Block* b) {
  throw InvariantViolation("expandable segments: " + what + " (block at " +
                           std::to_string(b->address) + ", " + std::to_string(b->size) +
                           " bytes)");
}
}  // namespace

void ExpandableSegmentsAllocator::check_invariants() const {
  absl::flat_hash_map<uintptr_t, const Block*> by_address;
  for (const BlockPool* pool : {&large_blocks_, &small_blocks_, &large_unmapped_, &small_unmapped_}) {
    if (std::string broken = pool->check_index(); !broken.empty())
      throw InvariantViolation("expandable segments: pool index: " + broken);
    for (const auto& e : pool->entries()) {
      if (!e.block->is_free()) violated("busy block present in a pool", e.block);
      by_address[e.block->address] = e.block;
    }
  }
  for (const Block* b : active_blocks_) {
    if (b->is_free()) violated("free block in the active set", b);
    if (!is_mapped(b)) violated("active block is not mapped", b);
    by_address[b->address] = b;
  }
  size_t chained = 0, mapped_bytes = 0;
  for (const auto& [base, seg] : segments_) {
    auto head = by_address.find(base);
    if (head == by_address.end())
      throw InvariantViolation("expandable segments: no block at segment base " +
                               std::to_string(base));
    if (head->second->prev) violated("segment head has a predecessor", head->second);
    uintptr_t expected = base;
    for (const Block* b = head->second; b; b = b->next) {
      ++chained;
      if (b->address != expected) violated("blocks do not tile the segment", b);
      if (b->size == 0 || b->size % kMinBlockSize != 0)
        violated("block size is not a positive multiple of 512", b);
      if (b->stream != seg->stream || b->pool->is_small() != seg->is_small)
        violated("block disagrees with its segment on stream or pool", b);
      if (b->next && b->next->prev != b) violated("next->prev does not point back", b);
      const size_t first = (b->address - base) / seg->page_bytes;
      const size_t last = (b->address + b->size - base + seg->page_bytes - 1) / seg->page_bytes;
      auto page = seg->pages.lower_bound(first);
      if (is_mapped(b)) {
        for (size_t p = first; p < last; ++p, ++page)
          if (page == seg->pages.end() || page->first != p)
            violated("mapped block covers an unmapped page", b);
        if (b->next && b->is_free() && b->next->is_free() && is_mapped(b->next))
          violated("two free mapped neighbours were not merged", b);
      } else {
        if ((b->address - base) % seg->page_bytes != 0 || b->size % seg->page_bytes != 0)
          violated("unmapped block is not page aligned", b);
        if (page != seg->pages.end() && page->first < last)
          violated("unmapped block covers a mapped page", b);
        if (b->next && !is_mapped(b->next)) violated("two unmapped neighbours were not merged", b);
      }
      expected = b->address + b->size;
    }
    if (expected != base + seg->bytes()) violated("segment chain is short or long", head->second);
    mapped_bytes += seg->pages.size() * seg->page_bytes;
  }
  if (chained != by_address.size())
    throw InvariantViolation("expandable segments: indexed blocks outside every segment");
  if (mapped_bytes != reserved_bytes_)
    throw InvariantViolation("expandable segments: reserved bytes " +
                             std::to_string(reserved_bytes_) + " differ from mapped pages " +
                             std::to_string(mapped_bytes));
}

}  // namespace cachealloc
