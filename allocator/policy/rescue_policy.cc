#include "allocator/policy/rescue_policy.h"

#include <algorithm>

#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/expandable/expandable_segment.h"
#include "allocator/engine/port/policy_engine.h"
#include "allocator/policy/page_donors.h"

namespace cachealloc {

void RescuePolicy::shape_config(AllocatorConfig& config) const {
  config.expandable_segments = true;
  // 2 MiB pages in the large pool too: a hole between live blocks keeps at
  // most one partly used page mapped at each end, where native's 20 MiB
  // pages keep up to 20 MiB each.
  config.large_segment_size = kSmallBuffer;
  // ... and 20 MiB physical handles (cells, page_handles.h) where
  // map_in_cells allows: the whole 20 MiB runs of the request's part of a
  // mapping, 2 MiB handles at its ragged end, so such a mapping and its
  // later unmapping cost native's driver calls, not ten times them (issue
  // 48: two_streams moves memory between its streams every step under a
  // limit). A cell mapped whole is unmapped whole.
  config.large_cell_bytes = kLargeBuffer;
}

Block* RescuePolicy::on_miss(PolicyEngine& engine, const MissRequest& r) {
  const PrivatePool* owner = r.pool->owner();
  // No limit, or a MemPool with its own allocator: native's miss, as is
  // (without a limit the pages it needs; nothing is mapped ahead, so
  // reserved stays at or below native's 20 MiB pages').
  if (!engine.limit().is_set() || (owner && owner->segment_source)) return engine.native_alloc(r);
  // Under a limit: native's search for room (the lowest gap of the
  // stream's range), the limit checked by before_map against the pages
  // really mapped (native's check counts the request's whole-segment
  // size). While the limit has room, a large-pool miss maps up to a whole
  // kLargeBuffer (native's 20 MiB page) as native would, so growth near the
  // limit takes no more mappings than native's; the last pages before the
  // limit go one by one.
  MissRequest m = r;
  if (!r.pool->is_small()) {
    const size_t reserved = engine.reserved_bytes();
    const size_t allowed = engine.limit().allowed_bytes();
    const size_t room = allowed > reserved ? (allowed - reserved) / kSmallBuffer * kSmallBuffer : 0;
    const size_t ahead = (r.size + kLargeBuffer - 1) / kLargeBuffer * kLargeBuffer;
    m.size = std::max(r.size, std::min(ahead, room));
  }
  if (Block* b = engine.map_for(m)) return b;
  return m.size == r.size ? nullptr : engine.map_for(r);
}

bool RescuePolicy::before_map(PolicyEngine& engine, ExpandableSegment& segment, uintptr_t start,
                              size_t bytes) {
  (void)segment;
  const MemoryLimit& limit = engine.limit();
  // Without a limit: native's miss (on_miss), nothing to check.
  if (!limit.is_set()) return true;
  const size_t allowed = limit.allowed_bytes();
  took_from_other_stream_ = false;
  if (engine.reserved_bytes() + bytes <= allowed) return true;
  // A graph may be capturing: no unmapping (it waits for a stream).
  if (engine.routing()) return false;
  reclaim(engine, start, bytes, engine.reserved_bytes() + bytes - allowed, segment.stream());
  return engine.reserved_bytes() + bytes <= allowed;
}

bool RescuePolicy::map_in_cells(const PolicyEngine& engine, const ExpandableSegment& segment,
                                uintptr_t start, size_t bytes) {
  (void)segment, (void)start, (void)bytes;
  // Without a limit nothing is unmapped but by empty_cache: cells cost no
  // memory. Under one, only a mapping whose room came from another stream's
  // free pages: the memory that moves between stream-private caches every
  // step (two_streams) and is unmapped whole again. A mapping that fits, or
  // that took room from its own stream (fragmentation repair), keeps 2 MiB
  // handles: there a later free run may end anywhere, and a cell it cuts
  // stays mapped (the lab's strand traces: up to 290 MiB more at the limit
  // with cells everywhere). And only with headroom: at the very limit a
  // cell cut by a later free run strands up to 18 MiB that 2 MiB handles
  // would give back, so there memory wins over driver calls.
  const MemoryLimit& limit = engine.limit();
  if (!limit.is_set()) return true;
  if (!took_from_other_stream_) return false;
  const size_t allowed = limit.allowed_bytes();
  return peak_allocated_ + allowed / kCellHeadroomDivisor < allowed;
}

BlockPool::iterator RescuePolicy::find_cached(PolicyEngine& engine, BlockPool& pool,
                                              StreamId stream, size_t size) {
  const size_t reach = engine.allocated_bytes() + size;
  const MemoryLimit& limit = engine.limit();
  if (reach > peak_allocated_ && (!limit.is_set() || reach <= limit.allowed_bytes()))
    peak_allocated_ = reach;
  return PlacementPolicy::find_cached(engine, pool, stream, size);
}

bool RescuePolicy::release_on_empty_cache(const Block* free_block) const {
  return free_block->pool->is_small() || free_block->size >= kLargeBuffer;
}

size_t RescuePolicy::reclaim(PolicyEngine& engine, uintptr_t start, size_t bytes, size_t target,
                             StreamId stream) {
  size_t reclaimed = 0;
  for (const PageDonor& d : page_donors(engine, start, bytes)) {
    if (reclaimed >= target) break;
    if (d.block->stream != stream) took_from_other_stream_ = true;
    // Exactly what the mapping still needs (whole handles: a cell goes
    // whole), from the top of the block: the rest stays cached for its own
    // stream's next step. Giving all its pages instead moved several times
    // the bytes every step on two_streams (each stream then maps back what
    // it lost), a driver call per page and handle.
    const size_t page = engine.segment_of(d.block->address)->page_bytes();
    reclaimed += engine.unmap_top_pages(d.block, (target - reclaimed + page - 1) / page * page);
  }
  return reclaimed;
}

}  // namespace cachealloc
