// The memory one engine holds from its device: whole segments (from the
// backend, or a private pool's own SegmentSource) and the mapped pages of
// expandable segments (the sub-part ExpandableBlocks), the bytes they
// total, the limit on that total, the first Block of every segment and the
// spare Block objects that splits and merges take and give back.
//
// Invariants (check(), between engine operations):
//   reserved_bytes() == sum over segments of the bytes of their blocks
//     (a mapped range of an expandable segment is a segment of its own);
//   the blocks of each segment tile it (block.h's rules: no gap, no
//     overlap, no two free neighbours, one stream and pool, sizes multiples
//     of 512), and segments do not overlap;
//   a block is in its pool's free index  <=>  it is free;
//   every spare Block is in the spare state (block_recycler.h);
//   ExpandableBlocks' invariants (expandable_blocks.h);
//   fast path: has(kExpandableBlocks) == expandable().on() || !expandable().empty().
// What it cannot check alone (the pools' indexes and segment counts, the
// stream events' waiting blocks, the engine's allocated bytes) it counts
// into a Census for the engine to compare.
//
// Every reservation and release is reported to the observers
// (kSegmentAlloc/Free, kSegmentMap/Unmap) after this part's state is
// consistent, in native's order. Costs: one device call per reservation,
// release, mapping or unmapping; O(segments) to find a head on release.
// Units: bytes and addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/base/device_backend.h"
#include "allocator/config/config.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/blocks/block_recycler.h"
#include "allocator/engine/blocks/fast_path.h"
#include "allocator/engine/blocks/segment_heads.h"
#include "allocator/engine/expandable/expandable_blocks.h"
#include "allocator/engine/observe/engine_observers.h"
#include "allocator/engine/pools/private_pool.h"
#include "allocator/engine/segments/segment_views.h"

namespace cachealloc {

class DeviceSegments {
 public:
  // `backend`, `config` (the engine's config in force), `observers` and
  // `fast` must outlive this part.
  DeviceSegments(int device, DeviceBackend& backend, const AllocatorConfig& config,
                 EngineObservers& observers, FastPath& fast)
      : device_(device), backend_(backend), config_(config), observers_(observers), fast_(fast) {}
  // Deletes the Blocks of the segments still held. The memory itself is
  // returned by the backend's owner (the process is ending, or the
  // simulated device is dropped).
  ~DeviceSegments();
  DeviceSegments(const DeviceSegments&) = delete;
  DeviceSegments& operator=(const DeviceSegments&) = delete;

  // Bytes held from the device now (whole segments and mapped pages).
  size_t reserved_bytes() const { return reserved_bytes_; }
  // The limit on reserved_bytes() (set_per_process_memory_fraction).
  const MemoryLimit& limit() const { return limit_; }
  MemoryLimit& limit() { return limit_; }
  // Spare Blocks for the engine's splits and merges (steps of a cache hit).
  BlockRecycler& recycler() { return recycler_; }
  const ExpandableBlocks& expandable() const { return expandable_; }
  // The expandable_segments setting (expandable_blocks.h).
  void set_expandable(bool on);

  // What handing out a block of `pool` that no index holds (a fresh
  // segment's, one grown in an expandable segment, one taken from a
  // use_on_oom pool) needs from the heap: a spare Block for the remainder
  // and index nodes to insert it, taken before the block leaves the cache
  // or the device is asked. Throws std::bad_alloc, nothing changed. Nothing
  // may insert into `pool` or take a spare between this and that hand-out.
  void prepare_unindexed_block(BlockPool& pool) {
    recycler_.reserve_one();
    pool.reserve_for_insert();
  }

  // native: get_free_block's choice: best_fit (best_fit.h), or with
  // expandable segments present, their search by grown size. Pure.
  BlockPool::iterator find_cached(BlockPool& pool, StreamId stream, size_t size) const;

  // native: alloc_block's body. Memory for a request of `size` rounded
  // bytes on `stream` in `pool` that found no cached block, if the limit
  // lets `segment_bytes` more be reserved (native checks the whole-segment
  // size even when it then maps pages): pages mapped into an expandable
  // segment while the setting is on (unless the pool has its own
  // SegmentSource), else a whole segment of `segment_bytes`. Returns its
  // free block, in no index, or null when the limit or the device refused.
  // `may_map` is asked before each mapping (expandable_blocks.h). Throws
  // BackendError or std::bad_alloc with nothing reserved for this call
  // (for pages: every mapping so far reported and cached).
  Block* allocate(BlockPool& pool, StreamId stream, size_t size, size_t segment_bytes,
                  const ContextPtr& ctx,
                  ExpandableBlocks::MayMap may_map = ExpandableBlocks::always_map);
  // Pages mapped for the request (ExpandableBlocks::allocate), without the
  // whole-segment limit check. Requires the setting on.
  Block* map_pages(BlockPool& pool, StreamId stream, size_t size, const ContextPtr& ctx,
                   ExpandableBlocks::MayMap may_map);
  // native: release_block. Returns one whole unsplit cached segment: first
  // to its source (if that fails, it stays cached and nothing was
  // recorded), then the event, then the bookkeeping.
  void release(Block* block, const ContextPtr& ctx);
  // native: unmap_block (expandable_blocks.h). `b`: a free, indexed block
  // of an expandable segment.
  void unmap(Block* b, const ContextPtr& ctx,
             ExpandableBlocks::EmptySegment empty = ExpandableBlocks::EmptySegment::kRelease);
  // Releases the expandable segments of `pool` with nothing mapped (a
  // private pool's, when the pool goes).
  void release_unmapped(const BlockPool& pool);
  // The expandable segment holding `address`, or null. O(log s).
  ExpandableSegment* expandable_segment_of(uintptr_t address) const {
    return expandable_.segment_of(address);
  }

  // The heads of `pool`'s segments, in address order. O(segments).
  std::vector<const Block*> heads_of(const PrivatePool& pool) const;
  // Every segment, in address order.
  std::vector<SegmentView> views() const;

  // What check() counted for the engine to compare with the other parts.
  struct Census {
    size_t allocated_bytes = 0;  // of blocks handed out
    size_t free_blocks = 0;      // blocks that are free (should be indexed)
    absl::flat_hash_map<const PrivatePool*, int> segments_of;  // per private pool
    // Freed blocks with stream uses but no events yet (deferred frees).
    absl::flat_hash_set<const Block*> waiting;
    // Blocks allocated or waiting for events.
    absl::flat_hash_set<const Block*> busy;
  };
  // Throws InvariantViolation for the first broken rule above.
  Census check() const;

 private:
  // A whole segment of `bytes` from `pool`'s source, or null if it has no
  // room.
  Block* reserve_whole(BlockPool& pool, StreamId stream, size_t bytes, const ContextPtr& ctx);
  // Counts mapped (unmapped) pages in the reserved bytes and tells the
  // observers (native: map_block's and unmap_block's stats and trace).
  void account_pages(const ExpandableBlocks::PageChange& change);
  // Where `pool`'s segments come from: its private pool's source, or the
  // device's backend.
  SegmentSource& source_of(const BlockPool& pool) {
    const PrivatePool* owner = pool.owner();
    return owner && owner->segment_source ? *owner->segment_source : backend_;
  }
  // Keeps the fast path's kExpandableBlocks at exit (segments come and go).
  auto expandable_flag_at_exit() {
    return FastPath::KeepAtExit(fast_, FastPath::kExpandableBlocks,
                                [this] { return expandable_.on() || !expandable_.empty(); });
  }

  const int device_;
  DeviceBackend& backend_;
  const AllocatorConfig& config_;
  EngineObservers& observers_;
  FastPath& fast_;
  // The first block of every segment. A segment's head Block object lives
  // as long as the segment: splits keep the front in the original object,
  // and a freed block merges into its free lower neighbour, never the other
  // way round. Changes only when segments are reserved or released.
  SegmentHeads heads_;
  size_t reserved_bytes_ = 0;
  MemoryLimit limit_;
  // Block objects for splits to take and merges and releases to give back.
  BlockRecycler recycler_;
  // The expandable segments, their blocks and the setting (declared after
  // the recycler and the segment heads it shares).
  ExpandableBlocks expandable_{device_, backend_, recycler_, heads_};
};

}  // namespace cachealloc
