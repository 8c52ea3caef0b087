// Segment listing shared by both allocator policies
// (DeviceCachingAllocator::segments in inspection.cc,
// ExpandableSegmentsAllocator::segments in expandable_release.cc). Cold:
// snapshots and invariant checks only.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "allocator/block.h"
#include "allocator/block_pool.h"
#include "allocator/device_allocator.h"

namespace cachealloc {

// One SegmentView per head in `heads` (any order), in address order. A view
// holds its head and the blocks after it (following next) while
// in_view(const Block*) is true: always for a native segment, up to the
// first unmapped block for an expandable one. Stream, pool and context come
// from the head. Cost: O(h log h + blocks listed) for h heads.
template <typename InView>
std::vector<SegmentView> segment_views(int device, std::vector<const Block*> heads,
                                       InView in_view) {
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
    for (const Block* b = head; b && in_view(b); b = b->next) s.blocks.push_back(b);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace cachealloc
