// Read-only views of the engine: segment listing and the invariant check
// that tests (and debug builds of the bindings) run after operations.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/base/errors.h"
#include "allocator/engine/segment_views.h"
#include "allocator/engine/size_policy.h"

namespace cachealloc {

std::vector<SegmentView> DeviceCachingAllocator::segments() const {
  return segment_views(device_, {segment_heads_.begin(), segment_heads_.end()});
}

void block_invariant_broken(const std::string& what, const Block* b) {
  throw InvariantViolation("invariant broken: " + what + " (block at " +
                           std::to_string(b->address) + ", " +
                           std::to_string(b->size) + " bytes)");
}

void DeviceCachingAllocator::check_invariants() const {
  pools_.check();
  std::vector<const BlockPool*> pools = {&large_blocks_, &small_blocks_};
  pools_.for_each([&](const PrivatePool& p) {
    pools.push_back(&p.large);
    pools.push_back(&p.small);
  });
  size_t indexed_blocks = 0;
  for (const BlockPool* pool : pools) {
    if (std::string broken = pool->check_index(); !broken.empty())
      throw InvariantViolation("invariant broken: pool index: " + broken);
    indexed_blocks += pool->size();
  }
  absl::flat_hash_map<const PrivatePool*, int> segments_of;
  absl::flat_hash_set<const Block*> waiting;  // freed, not yet cached: no events yet
  absl::flat_hash_set<const Block*> busy;     // allocated or waiting for events
  size_t reserved = 0, free_blocks = 0, allocated = 0;
  uintptr_t previous_end = 0;
  for (const SegmentView& s : segments()) {
    const Block* head = s.blocks.front();
    if (s.address < previous_end) block_invariant_broken("segments overlap", head);
    if (const PrivatePool* owner = head->pool->owner()) ++segments_of[owner];
    if (s.is_expandable) {
      // A mapped range of an expandable segment: its head starts a range.
      const ExpandableSegment* seg = expandable_.segment_of(s.address);
      if (!seg) block_invariant_broken("expandable block outside every expandable segment", head);
      const auto range = seg->ranges().find(s.address);
      if (range == seg->ranges().end() || range->second.head != head)
        block_invariant_broken("expandable segment head does not start a mapped range", head);
    }
    size_t segment_bytes = 0;
    for (const Block* b : s.blocks) {
      if (b->expandable != s.is_expandable)
        block_invariant_broken("a segment mixes expandable and other blocks", b);
      if (b->size == 0 || b->size % kMinBlockSize != 0)
        block_invariant_broken("block size is not a positive multiple of 512", b);
      if (b->stream != head->stream || b->pool != head->pool)
        block_invariant_broken("blocks of one segment disagree on stream or pool", b);
      if (b->next) {
        if (b->next->prev != b) block_invariant_broken("next->prev does not point back", b);
        if (b->next->address != b->address + b->size)
          block_invariant_broken("blocks do not tile the segment (gap or overlap)", b);
        if (b->is_free() && b->next->is_free())
          block_invariant_broken("two free neighbours were not merged", b);
      }
      const bool indexed = b->pool->contains(b);
      if (b->is_free() != indexed)
        block_invariant_broken(
            b->is_free() ? "free block missing from its pool" : "busy block present in a pool", b);
      if (b == head && b->prev) block_invariant_broken("segment head has a lower neighbour", b);
      if (b->is_free() && b->context_when_allocated)
        block_invariant_broken("free block holds an allocation context", b);
      if (b->is_free()) ++free_blocks;
      else busy.insert(b);
      if (!b->allocated && b->event_count == 0 && !b->stream_uses.empty()) waiting.insert(b);
      if (b->allocated) allocated += b->size;
      segment_bytes += b->size;
    }
    reserved += segment_bytes;
    previous_end = s.address + segment_bytes;
  }
  // Expandable segments: ordered, disjoint, each well formed, every range
  // listed among the segments (so counted in `reserved` above).
  expandable_.check();
  if (reserved != reserved_bytes_)
    throw InvariantViolation("reserved bytes " + std::to_string(reserved_bytes_) +
                             " differ from the segments' total " +
                             std::to_string(reserved));
  if (free_blocks != indexed_blocks)
    throw InvariantViolation("pool index holds blocks that are in no segment");
  pools_.check_segment_counts(segments_of);
  recycler_.check();
  events_.check(waiting, busy);
  // The fast-path flags are what refresh_fast_path() derives from state.
  if ((malloc_slow_ & kStreamWork) != (slow_reasons() & kStreamWork))
    throw InvariantViolation("stream work flag disagrees with the event queues");
  if ((malloc_slow_ & kExpandableBlocks) != (slow_reasons() & kExpandableBlocks))
    throw InvariantViolation("expandable flag disagrees with the setting and the segments");
  if (routing_ != pools_.routing())
    throw InvariantViolation("routing flag disagrees with the routes");
  if (allocated != allocated_bytes_)
    throw InvariantViolation("allocated bytes " + std::to_string(allocated_bytes_) +
                             " differ from the allocated blocks' total " +
                             std::to_string(allocated));
}

}  // namespace cachealloc
