// PolicyEngine (policy_engine.h): the steps that take more than a line.
#include "allocator/engine/port/policy_engine.h"

#include <algorithm>

#include "allocator/engine/expandable/expandable_segment.h"

namespace cachealloc {

Block* PolicyEngine::native_alloc(const MissRequest& m) {
  return p_.segments.allocate(*m.pool, m.stream, m.size, m.alloc_size, ctx_,
                              [this](ExpandableSegment& seg, uintptr_t start, size_t bytes,
                                     bool* cells) { return may_map(seg, start, bytes, cells); });
}

Block* PolicyEngine::map_for(const MissRequest& m) {
  return p_.segments.map_pages(*m.pool, m.stream, m.size, ctx_,
                               [this](ExpandableSegment& seg, uintptr_t start, size_t bytes,
                                      bool* cells) { return may_map(seg, start, bytes, cells); });
}

void PolicyEngine::unmap_free_pages(Block* b) {
  p_.segments.unmap(b, ctx_, ExpandableBlocks::EmptySegment::kKeep);
}

size_t PolicyEngine::whole_page_bytes(const ExpandableSegment& segment, uintptr_t address,
                                      size_t size) {
  // Handles, not pages: a cell mapped as one handle goes whole or not at all.
  const uintptr_t first = segment.handle_up(address);
  const uintptr_t last = segment.handle_down(address + size);
  return last > first ? last - first : 0;
}

size_t PolicyEngine::unmap_top_pages(Block* b, size_t bytes) {
  ExpandableSegment& seg = *segment_of(b->address);
  const size_t page = seg.page_bytes();
  const size_t whole = whole_page_bytes(seg, b->address, b->size);
  bytes = std::min(whole, bytes / page * page);
  if (bytes == 0) return 0;
  if (bytes == whole) {
    unmap_free_pages(b);
    return bytes;
  }
  // Cut b at `hole`: b keeps [b, hole), a new free block `upper` takes
  // [hole, b's end), and unmap_free_pages(upper) unmaps upper's whole pages,
  // which are exactly [hole, hole + bytes). Between the cut and the unmap
  // b and upper are two free neighbours, which the unmap separates.
  const uintptr_t top = seg.handle_down(b->address + b->size);
  // The hole starts on a handle boundary: a cell mapped as one handle is
  // unmapped whole (more than asked), never cut.
  const uintptr_t hole = seg.handle_down(top - bytes);
  bytes = top - hole;
  if (bytes == whole) {
    unmap_free_pages(b);
    return bytes;
  }
  const uintptr_t end = b->address + b->size;
  BlockPool& pool = *b->pool;
  // Host memory first (the Block, the index nodes), each failure undoing
  // what came before it, so a std::bad_alloc leaves b as it was.
  Block* upper = p_.segments.recycler().take();
  upper->address = hole;
  upper->size = end - hole;
  upper->requested_size = 0;
  upper->stream = b->stream;
  upper->pool = b->pool;
  upper->prev = nullptr;
  upper->next = nullptr;
  upper->gc_count_base = 0;
  upper->expandable = true;
  try {
    pool.insert(upper);
  } catch (...) {
    upper->expandable = false;
    p_.segments.recycler().give_back_unused(upper);
    throw;
  }
  try {
    pool.reserve_for_insert();
  } catch (...) {
    pool.erase(upper);
    upper->expandable = false;
    p_.segments.recycler().give_back_unused(upper);
    throw;
  }
  pool.erase(b);
  b->size = hole - b->address;
  pool.insert(b);  // cannot fail: reserved above
  upper->prev = b;
  upper->next = b->next;
  if (upper->next) upper->next->prev = upper;
  b->next = upper;
  try {
    unmap_free_pages(upper);
  } catch (...) {
    // The device refused: join the two again (no node is needed: one
    // entry goes, one changes key through erase + the insert's freed slot).
    pool.erase(upper);
    pool.erase(b);
    b->size += upper->size;
    b->next = upper->next;
    if (b->next) b->next->prev = b;
    upper->expandable = false;
    p_.segments.recycler().recycle(upper);
    pool.insert(b);
    throw;
  }
  return bytes;
}

}  // namespace cachealloc
