// DeviceSegments (device_segments.h): reserving and releasing segments,
// mapping pages, and the segment-wide invariant check.
#include "allocator/engine/segments/device_segments.h"

#include <algorithm>
#include <string>

#include "allocator/base/errors.h"
#include "allocator/engine/blocks/best_fit.h"
#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/observe/engine_events.h"

namespace cachealloc {

DeviceSegments::~DeviceSegments() {
  for (Block* head : heads_) {
    for (Block* b = head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

void DeviceSegments::set_expandable(bool on) {
  const auto flag = expandable_flag_at_exit();
  expandable_.set_on(on);
}

BlockPool::iterator DeviceSegments::find_cached(BlockPool& pool, StreamId stream,
                                                size_t size) const {
  return expandable_.empty() ? best_fit(pool, stream, size, config_)
                             : expandable_.find_free_block(pool, stream, size, config_);
}

Block* DeviceSegments::allocate(BlockPool& pool, StreamId stream, size_t size,
                                size_t segment_bytes, const ContextPtr& ctx,
                                ExpandableBlocks::MayMap may_map) {
  if (limit_.refuses(reserved_bytes_, segment_bytes)) return nullptr;
  // A pool whose segments come from another allocator (MemPool(allocator=))
  // takes them from it even with expandable segments on, as native 2.11
  // does for such an "active" pool; every other pool maps pages.
  const PrivatePool* const owner = pool.owner();
  if (expandable_.on() && !(owner && owner->segment_source))
    return map_pages(pool, stream, size, ctx, may_map);
  return reserve_whole(pool, stream, segment_bytes, ctx);
}

Block* DeviceSegments::map_pages(BlockPool& pool, StreamId stream, size_t size,
                                 const ContextPtr& ctx, ExpandableBlocks::MayMap may_map) {
  const auto flag = expandable_flag_at_exit();  // a new expandable segment
  return expandable_.allocate(
      pool, stream, size, config_, ctx, [this](const auto& change) { account_pages(change); },
      may_map);
}

Block* DeviceSegments::reserve_whole(BlockPool& pool, StreamId stream, size_t bytes,
                                     const ContextPtr& ctx) {
  // Host memory first: a std::bad_alloc here leaves nothing reserved on the
  // device. After the device call nothing below (nor the hand-out that
  // takes the block next) may throw.
  Block* b = recycler_.take();  // a spare's placement fields are stale: set all
  try {
    heads_.reserve_one();
    prepare_unindexed_block(pool);
  } catch (...) {
    recycler_.give_back_unused(b);
    throw;
  }
  uintptr_t address = 0;
  try {
    address = source_of(pool).allocate(device_, bytes, stream);
  } catch (...) {
    recycler_.give_back_unused(b);
    throw;
  }
  if (address == 0) {
    recycler_.give_back_unused(b);
    return nullptr;
  }

  reserved_bytes_ += bytes;
  if (PrivatePool* owner = pool.owner()) ++owner->segment_count;
  b->address = address;
  b->size = bytes;
  b->requested_size = 0;
  b->stream = stream;
  b->pool = &pool;
  b->prev = nullptr;
  b->next = nullptr;
  b->gc_count_base = 0;
  b->context_when_segment_allocated = ctx;
  heads_.insert(b);

  EngineEvent e = segment_event(EventKind::kSegmentAlloc, pool, stream, address, bytes,
                                config_.max_split_size, &ctx);
  observers_.emit(e);
  return b;
}

void DeviceSegments::release(Block* block, const ContextPtr& ctx) {
  source_of(*block->pool).release(device_, block->address, block->size);
  EngineEvent e = segment_event(EventKind::kSegmentFree, *block->pool, block->stream,
                                block->address, block->size, config_.max_split_size,
                                ctx ? &ctx : &block->context_when_segment_allocated);
  observers_.emit(e);

  reserved_bytes_ -= block->size;
  if (PrivatePool* owner = block->pool->owner()) --owner->segment_count;
  block->pool->erase(block);
  heads_.erase(block);
  recycler_.recycle(block);
}

void DeviceSegments::unmap(Block* b, const ContextPtr& ctx, ExpandableBlocks::EmptySegment empty) {
  const auto flag = expandable_flag_at_exit();  // a segment left with nothing mapped goes
  expandable_.unmap(b, ctx, [this](const auto& change) { account_pages(change); }, empty);
}

void DeviceSegments::release_unmapped(const BlockPool& pool) {
  const auto flag = expandable_flag_at_exit();
  expandable_.release_unmapped(pool);
}

void DeviceSegments::account_pages(const ExpandableBlocks::PageChange& change) {
  if (change.kind == EventKind::kSegmentMap) reserved_bytes_ += change.bytes;
  else reserved_bytes_ -= change.bytes;
  EngineEvent e = segment_event(change.kind, *change.pool, change.stream, change.address,
                                change.bytes, config_.max_split_size, change.context);
  observers_.emit(e);
}

std::vector<const Block*> DeviceSegments::heads_of(const PrivatePool& pool) const {
  std::vector<const Block*> heads;
  for (const Block* head : heads_)
    if (head->pool->owner() == &pool) heads.push_back(head);
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->address < b->address; });
  return heads;
}

std::vector<SegmentView> DeviceSegments::views() const {
  return segment_views(device_, {heads_.begin(), heads_.end()});
}

DeviceSegments::Census DeviceSegments::check() const {
  Census c;
  size_t reserved = 0;
  uintptr_t previous_end = 0;
  for (const SegmentView& s : views()) {
    const Block* head = s.blocks.front();
    if (s.address < previous_end) block_invariant_broken("segments overlap", head);
    if (const PrivatePool* owner = head->pool->owner()) ++c.segments_of[owner];
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
      if (b->is_free()) ++c.free_blocks;
      else c.busy.insert(b);
      if (!b->allocated && b->event_count == 0 && !b->stream_uses.empty()) c.waiting.insert(b);
      if (b->allocated) c.allocated_bytes += b->size;
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
                             " differ from the segments' total " + std::to_string(reserved));
  recycler_.check();
  if (fast_.has(FastPath::kExpandableBlocks) != (expandable_.on() || !expandable_.empty()))
    throw InvariantViolation("expandable flag disagrees with the setting and the segments");
  return c;
}

}  // namespace cachealloc
