// The blocks of expandable segments (expandable_segments:True): the
// sub-part of DeviceSegments that owns one device's ExpandableSegments, finds
// where a request fits by growing a segment, maps and unmaps pages, and
// runs the best-fit search that knows about growth. Native 2.11's
// find_expandable_block, try_allocate_expandable_block, map_block,
// unmap_block, release_expandable_segment and get_free_block's expandable
// branch, step for step, over expandable_segment.h's representation
// (unmapped parts are gaps, not Blocks). Out of line: the cache-hit path
// never comes here.
//
// What it shares with DeviceSegments, and how:
//   - its Block recycler and its set of segment heads, which this
//     part changes as mapped ranges appear, join, split and vanish (a
//     range's head is a segment head, so snapshots list each range as a
//     segment);
//   - every mapping and unmapping is reported through a PageChange
//     callback, after this part's own state is consistent: DeviceSegments
//     counts the bytes in its reserved total and tells the observers. This
//     part keeps no byte totals of its own.
//   - free blocks stay in the engine's BlockPools (each segment names its
//     pool): this part inserts and erases the blocks it maps and unmaps.
//
// Invariants (check(), from DeviceSegments::check):
//   - segments() is in address order and no two segments overlap;
//   - every segment's own invariants hold (ExpandableSegment::check);
//   - every mapped range's head is one of the segment heads, and the
//     expandable segment heads are exactly those heads
//     (#expandable heads == #ranges over all segments);
//   - the reserved bytes include each segment's mapped_bytes() (checked by
//     DeviceSegments, which sums its segment views).
// Units: bytes and addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/event_kind.h"
#include "allocator/config/config.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/blocks/block_recycler.h"
#include "allocator/engine/blocks/segment_heads.h"
#include "allocator/engine/expandable/expandable_segment.h"

namespace cachealloc {

class ExpandableBlocks {
 public:
  // Pages mapped (kSegmentMap) or unmapped (kSegmentUnmap): [address,
  // address + bytes) of a segment of `pool` on `stream`; `context`: where
  // the change was asked (never null; may point at a null ContextPtr).
  struct PageChange {
    EventKind kind;
    const BlockPool* pool;
    StreamId stream;
    uintptr_t address;
    size_t bytes;
    const ContextPtr* context;
  };
  // Called once per change, in the order native emits them.
  using OnPages = absl::FunctionRef<void(const PageChange&)>;
  // Asked before each mapping of `bytes` (whole pages) at `start`, a gap of
  // the segment, before anything for it is taken: false refuses it (the
  // allocation then fails as a device refusal would). The placement
  // policy's before_map; it may unmap other free pages first, through this
  // part (never the gap's own neighbours). Native: always true. For a
  // segment with cells (page_handles.h), setting *cells false maps this
  // one in pages only (it starts true).
  using MayMap = absl::FunctionRef<bool(ExpandableSegment& segment, uintptr_t start,
                                        size_t bytes, bool* cells)>;
  static bool always_map(ExpandableSegment&, uintptr_t, size_t, bool*) { return true; }
  // What unmap does with a segment left with nothing mapped: native
  // releases it at once. A policy's unmaps keep it (one may run mid-malloc,
  // which may be mapping into that segment): it stays reserved as address
  // space only, and allocate() maps into its gap before making a new one.
  enum class EmptySegment { kRelease, kKeep };

  // `backend`, `recycler` and `segment_heads` are DeviceSegments' and must
  // outlive this part.
  ExpandableBlocks(int device, DeviceBackend& backend, BlockRecycler& recycler,
                   SegmentHeads& segment_heads)
      : device_(device), backend_(backend), recycler_(recycler), segment_heads_(segment_heads) {}
  ExpandableBlocks(const ExpandableBlocks&) = delete;
  ExpandableBlocks& operator=(const ExpandableBlocks&) = delete;

  // The setting (native reads it from its global config; here per engine).
  // On: a request that misses maps pages into an expandable segment. Off:
  // free blocks of expandable segments are no longer reused.
  bool on() const { return on_; }
  void set_on(bool on) { on_ = on; }
  // Whether no expandable segment is reserved.
  bool empty() const { return segments_.empty(); }
  // The expandable segments reserved now, in address order.
  const std::vector<std::unique_ptr<ExpandableSegment>>& segments() const { return segments_; }
  // The segment whose address range holds `address`, or null. O(log s).
  ExpandableSegment* segment_of(uintptr_t address) const;

  // native: get_free_block with expandable blocks present. The best fit in
  // `pool` for `size` rounded bytes on `stream` (by the size a block can
  // grow to while on, skipping expandable blocks while off), under
  // `config`'s oversize rules; or pool.end().
  BlockPool::iterator find_free_block(BlockPool& pool, StreamId stream, size_t size,
                                      const AllocatorConfig& config) const;
  // native: try_allocate_expandable_block (with find_expandable_block). A
  // free block of at least `size` bytes in `pool`'s segments on `stream`,
  // grown by mapping pages at the lowest address that fits (a new segment
  // of 1 1/8 the device's memory when none has room), taken out of the
  // pool's index. Null when the device refused a mapping (pages mapped
  // before stay mapped and cached, as native's). Throws BackendError or
  // std::bad_alloc with every change made so far reported and consistent.
  Block* allocate(BlockPool& pool, StreamId stream, size_t size, const AllocatorConfig& config,
                  const ContextPtr& ctx, OnPages on_pages, MayMap may_map = always_map);
  // native: unmap_block, then release_expandable_segment if the segment has
  // nothing mapped left. `b` is a free, indexed block of an expandable
  // segment; the whole pages inside it are unmapped, what is left of it on
  // either side stays mapped, free and indexed.
  void unmap(Block* b, const ContextPtr& ctx, OnPages on_pages,
             EmptySegment empty = EmptySegment::kRelease);
  // Releases the segments of `pool` that have nothing mapped (a pool's
  // mapping the device refused), when the pool goes.
  void release_unmapped(const BlockPool& pool);

  // Throws InvariantViolation naming the first broken invariant above.
  void check() const;

 private:
  // Bytes of the gap right after `b` that b could grow into (native: the
  // size of an unmapped next block); 0 for a block that is not the last of
  // its mapped range.
  size_t unmapped_after(const Block* b) const;
  // native: map_block. Maps the pages over [start, start + bytes rounded up
  // to pages), a gap of `seg`, and returns the free block that holds them
  // (merged with free neighbours, indexed); null if the device refused.
  Block* map_gap(ExpandableSegment& seg, uintptr_t start, size_t bytes, const ContextPtr& ctx,
                 OnPages on_pages, MayMap may_map);
  // native: release_expandable_segment. Returns an unmapped segment's range.
  void release(ExpandableSegment* seg);

  const int device_;
  DeviceBackend& backend_;
  BlockRecycler& recycler_;
  SegmentHeads& segment_heads_;
  // In address order (native's expandable_segments_).
  std::vector<std::unique_ptr<ExpandableSegment>> segments_;
  bool on_ = false;
};

}  // namespace cachealloc
