// Read-only views of the engine: segment listing and the invariant check
// that tests (and debug builds of the bindings) run after operations.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "allocator/device_allocator.h"
#include "allocator/errors.h"
#include "allocator/segment_views.h"
#include "allocator/size_policy.h"

namespace cachealloc {

std::vector<SegmentView> DeviceCachingAllocator::segments() const {
  return segment_views(device_, {segment_heads_.begin(), segment_heads_.end()});
}

namespace {
[[noreturn]] void violated(const std::string& what, const Block* b) {
  throw InvariantViolation("invariant broken: " + what + " (block at " +
                           std::to_string(b->address) + ", " +
                           std::to_string(b->size) + " bytes)");
}
}  // namespace

void DeviceCachingAllocator::check_invariants() const {
  std::vector<const BlockPool*> pools = {&large_blocks_, &small_blocks_};
  for (const auto& [id, p] : private_pools_) {
    pools.push_back(&p->large);
    pools.push_back(&p->small);
    if (p->use_count < 0) throw InvariantViolation("pool " + id.to_string() + ": use count < 0");
    const bool listed = std::find(freeable_pools_.begin(), freeable_pools_.end(), p.get()) !=
                        freeable_pools_.end();
    if (listed != (p->use_count == 0))
      throw InvariantViolation("pool " + id.to_string() +
                               ": freeable list disagrees with its use count");
  }
  if (freeable_pools_.size() > private_pools_.size())
    throw InvariantViolation("freeable list holds a pool that does not exist");
  // A route may outlive its pool's last use (a caller released it while the
  // route was open), never the pool itself.
  for (const auto& [pool, filter] : routes_) {
    auto it = private_pools_.find(pool->id);
    if (it == private_pools_.end() || it->second.get() != pool)
      throw InvariantViolation("a route points at a pool that does not exist");
  }
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
    if (s.address < previous_end) violated("segments overlap", head);
    if (const PrivatePool* owner = head->pool->owner()) ++segments_of[owner];
    if (s.is_expandable) {
      // A mapped range of an expandable segment: its head starts a range.
      const ExpandableSegment* seg = segment_of(s.address);
      if (!seg) violated("expandable block outside every expandable segment", head);
      const auto range = seg->ranges().find(s.address);
      if (range == seg->ranges().end() || range->second.head != head)
        violated("expandable segment head does not start a mapped range", head);
    }
    size_t segment_bytes = 0;
    for (const Block* b : s.blocks) {
      if (b->expandable != s.is_expandable)
        violated("a segment mixes expandable and other blocks", b);
      if (b->size == 0 || b->size % kMinBlockSize != 0)
        violated("block size is not a positive multiple of 512", b);
      if (b->stream != head->stream || b->pool != head->pool)
        violated("blocks of one segment disagree on stream or pool", b);
      if (b->next) {
        if (b->next->prev != b) violated("next->prev does not point back", b);
        if (b->next->address != b->address + b->size)
          violated("blocks do not tile the segment (gap or overlap)", b);
        if (b->is_free() && b->next->is_free())
          violated("two free neighbours were not merged", b);
      }
      const bool indexed = b->pool->contains(b);
      if (b->is_free() != indexed)
        violated(b->is_free() ? "free block missing from its pool"
                              : "busy block present in a pool", b);
      if (b == head && b->prev) violated("segment head has a lower neighbour", b);
      if (b->is_free() && b->context_when_allocated)
        violated("free block holds an allocation context", b);
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
  size_t ranges = 0;
  uintptr_t previous_segment_end = 0;
  for (const auto& seg : expandable_) {
    if (seg->base() < previous_segment_end)
      throw InvariantViolation("expandable segments overlap or are out of order");
    previous_segment_end = seg->end();
    if (std::string broken = seg->check(); !broken.empty())
      throw InvariantViolation("invariant broken: " + broken);
    for (const auto& [start, range] : seg->ranges())
      if (!segment_heads_.contains(range.head))
        violated("expandable range's head is not a segment head", range.head);
    ranges += seg->ranges().size();
  }
  size_t expandable_views = 0;
  for (const Block* head : segment_heads_) expandable_views += head->expandable;
  if (expandable_views != ranges)
    throw InvariantViolation("expandable segment heads differ from the mapped ranges");
  if (((malloc_slow_ & kExpandableBlocks) != 0) != (expandable_on_ || !expandable_.empty()))
    throw InvariantViolation("expandable flag disagrees with the setting and the segments");
  if (reserved != reserved_bytes_)
    throw InvariantViolation("reserved bytes " + std::to_string(reserved_bytes_) +
                             " differ from the segments' total " +
                             std::to_string(reserved));
  if (free_blocks != indexed_blocks)
    throw InvariantViolation("pool index holds blocks that are in no segment");
  for (const auto& [id, p] : private_pools_)
    if (p->segment_count != segments_of[p.get()])
      throw InvariantViolation("pool " + id.to_string() + " counts " +
                               std::to_string(p->segment_count) + " segments but holds " +
                               std::to_string(segments_of[p.get()]));
  for (const Block* b : spare_blocks_)
    if (b->allocated || b->expandable || b->event_count != 0 || !b->stream_uses.empty() ||
        b->context_when_allocated || b->context_when_segment_allocated)
      violated("spare block is not in the spare state", b);
  // Deferred frees (defer_events): exactly the freed blocks that hold
  // stream uses but no events, each listed once.
  for (const Block* b : deferred_frees_)
    if (waiting.erase(b) != 1) violated("deferred free is not a freed block without events", b);
  if (!waiting.empty()) violated("freed block with stream uses has no events", *waiting.begin());
  if (((malloc_slow_ & kStreamWork) != 0) != (!events_.empty() || !deferred_frees_.empty()))
    throw InvariantViolation("stream work flag disagrees with the event queues");
  for (const auto& [b, streams] : route_stream_uses_)
    if (!busy.contains(b) || streams.empty())
      throw InvariantViolation("stream uses noted during a route for a block not in use");
  if (allocated != allocated_bytes_)
    throw InvariantViolation("allocated bytes " + std::to_string(allocated_bytes_) +
                             " differ from the allocated blocks' total " +
                             std::to_string(allocated));
}

}  // namespace cachealloc
