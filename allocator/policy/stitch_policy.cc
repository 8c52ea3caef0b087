#include "allocator/policy/stitch_policy.h"

#include <algorithm>

#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/expandable/expandable_segment.h"
#include "allocator/engine/port/policy_engine.h"
#include "allocator/policy/page_donors.h"

namespace cachealloc {

void StitchPolicy::shape_config(AllocatorConfig& config) const {
  config.expandable_segments = true;
  // 2 MiB pages in the large pool too (native: 20 MiB): finer pages leave
  // less of a range's last page unused and let smaller holes be reused.
  config.large_segment_size = kSmallBuffer;
  config.max_split_size = AllocatorConfig::kUnlimitedSplit;
}

BlockPool::iterator StitchPolicy::find_cached(PolicyEngine& engine, BlockPool& pool,
                                              StreamId stream, size_t size) {
  // Every malloc passes here: the peak of allocated bytes, this request in.
  last_request_ = engine.allocated_bytes() + size;
  alloc_peak_ = std::max(alloc_peak_, last_request_);
  return PlacementPolicy::find_cached(engine, pool, stream, size);
}

Block* StitchPolicy::on_miss(PolicyEngine& engine, const MissRequest& r) {
  // A MemPool with its own allocator: segments come from it (native).
  const PrivatePool* owner = r.pool->owner();
  if (owner && owner->segment_source) return engine.native_alloc(r);
  MissRequest m = r;
  // Under a limit, map ahead while the limit has room: up to a granule, so
  // the next requests grow into it without a device call (native's large
  // pages do this too). In the large pool the granule grows with reserved
  // memory (1/kMapAheadDivisor of it, at least kMapAheadLarge): a program
  // that has reserved a lot maps in larger steps, so the number of
  // mappings grows with the log of its memory, not linearly. Without a
  // limit, exactly the pages needed: reserved follows live bytes.
  const MemoryLimit& limit = engine.limit();
  if (limit.is_set()) {
    const size_t reserved = engine.reserved_bytes();
    const size_t granule =
        r.pool->is_small()
            ? kMapAheadSmall
            : std::max(kMapAheadLarge, reserved / kMapAheadDivisor / kSmallBuffer * kSmallBuffer);
    const size_t ahead = (r.size + granule - 1) / granule * granule;
    const size_t room = limit.allowed_bytes() > reserved ? limit.allowed_bytes() - reserved : 0;
    // What the limit leaves, in whole pages; never less than the request.
    m.size = std::max(r.size, std::min(ahead, room / kSmallBuffer * kSmallBuffer));
  }
  if (Block* b = engine.map_for(m)) return b;
  if (m.size == r.size) return nullptr;
  return engine.map_for(r);
}

bool StitchPolicy::before_map(PolicyEngine& engine, ExpandableSegment& segment, uintptr_t start,
                              size_t bytes) {
  (void)segment;
  const MemoryLimit& limit = engine.limit();
  // A graph may be capturing: no unmapping (it waits for a stream).
  const bool may_unmap = !engine.routing();
  if (!limit.is_set()) {
    // Below the peak of live bytes the program repeats itself (a training
    // step): a miss there comes back next step, and taking pages for it
    // moves them back and forth every step (an unmap and a map each). Such
    // a miss maps without taking pages while the bytes so mapped stay
    // within 1/kSlackDivisor of the live peak (a budget for the engine's
    // life); the pages then stay mapped and serve it as a hit next step.
    // Every other miss takes pages, so the peak follows live bytes.
    const size_t slack = alloc_peak_ / kSlackDivisor;
    const size_t after = engine.reserved_bytes() + bytes;
    const bool repeat = last_request_ < alloc_peak_;
    if (repeat && slack_used_ + bytes <= slack && after <= std::max(high_water_, alloc_peak_ + slack)) {
      slack_used_ += bytes;
    } else if (may_unmap) {
      reclaim(engine, start, bytes, bytes);
    }
    high_water_ = std::max(high_water_, engine.reserved_bytes() + bytes);
    return true;
  }
  const size_t allowed = limit.allowed_bytes();
  if (engine.reserved_bytes() + bytes <= allowed) return true;
  if (may_unmap) reclaim(engine, start, bytes, engine.reserved_bytes() + bytes - allowed);
  return engine.reserved_bytes() + bytes <= allowed;
}

size_t StitchPolicy::reclaim(PolicyEngine& engine, uintptr_t start, size_t bytes,
                             size_t target) {
  size_t reclaimed = 0;
  for (const PageDonor& c : page_donors(engine, start, bytes)) {
    if (reclaimed >= target) break;
    const ExpandableSegment* seg = engine.segment_of(c.block->address);
    const size_t page = seg->page_bytes();
    // Under a limit a block gives all its whole pages (one call either
    // way): the headroom lets the next misses map without reclaiming.
    // Without one, exactly what the mapping needs: reserved stays flat.
    const size_t want = engine.limit().is_set() ? c.pages
                                                : (target - reclaimed + page - 1) / page * page;
    reclaimed += engine.unmap_top_pages(c.block, want);
  }
  return reclaimed;
}

bool StitchPolicy::release_on_empty_cache(const Block* free_block) const {
  return free_block->size >= kKeepBelow;
}

}  // namespace cachealloc
