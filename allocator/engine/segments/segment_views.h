// Segment listing (DeviceSegments::views, device_segments.h; an
// expandable segment's mapped ranges are segments of their own). Cold:
// snapshots and invariant checks only.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/pools/private_pool.h"

namespace cachealloc {

// A read-only view of one segment, for snapshots and checks.
struct SegmentView {
  int device = 0;
  uintptr_t address = 0;
  StreamId stream = 0;
  bool is_small = false;
  PoolId pool_id;                       // (0, 0): the default pools
  bool is_expandable = false;           // a mapped range of an expandable segment
  const ContextPtr* context = nullptr;  // where the segment was reserved
  std::vector<const Block*> blocks;     // address order, tiling the segment
};

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
