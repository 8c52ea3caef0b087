// Segment listing (DeviceCachingAllocator::segments in inspection.cc; an
// expandable segment's mapped ranges are segments of their own). Cold:
// snapshots and invariant checks only.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "allocator/engine/block.h"
#include "allocator/engine/block_pool.h"
#include "allocator/engine/device_allocator.h"

namespace cachealloc {

// One SegmentView per head in `heads` (any order), in address order. A view
// holds its head and the blocks after it (following next). Stream, pool,
// context and whether it is expandable come from the head. Cost:
// O(h log h + blocks listed) for h heads.
inline std::vector<SegmentView> segment_views(int device, std::vector<const Block*> heads) {
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->address < b->address; });
  std::vector<SegmentView> out;
  out.reserve(heads.size());
  for (const Block* head : heads) {
    SegmentView s;
    s.device = device;
    s.address = head->address;
    s.stream = head->stream;
    s.is_small = head->pool->is_small();
    if (const PrivatePool* owner = head->pool->owner()) s.pool_id = owner->id;
    s.context = &head->context_when_segment_allocated;
    s.is_expandable = head->expandable;
    for (const Block* b = head; b; b = b->next) s.blocks.push_back(b);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace cachealloc
