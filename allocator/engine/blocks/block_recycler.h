// The Block objects a DeviceCachingAllocator keeps for reuse. Splits and
// merges make and drop Blocks on most cache hits (a split on a malloc, a
// merge on a free); recycling them keeps those steps off the heap.
//
// Invariant (check()): every spare Block is in the spare state:
//     !allocated, !expandable, event_count == 0, stream_uses empty, both
//     contexts null;
// its placement fields (address, size, requested_size, stream, pool, prev,
// next, gc_count_base) are stale. At most kMaxSpareBlocks are kept; the
// recycler owns them and deletes them when it goes.
//
// Exception safety: the list of spares has room for kMaxSpareBlocks from
// construction, so giving a Block back (recycle, recycle_absorbed,
// give_back_unused) never allocates and never throws: a merge or a release
// that has begun changing a segment cannot be stopped half way by it. Only
// take() and reserve_one() can throw (std::bad_alloc for a new Block).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "allocator/base/hot_inline.h"
#include "allocator/engine/blocks/block.h"

namespace cachealloc {

class BlockRecycler {
 public:
  // Throws std::bad_alloc if the list's room (32 KiB) cannot be had.
  BlockRecycler() { spares_.reserve(kMaxSpareBlocks); }
  ~BlockRecycler() {
    for (Block* b : spares_) delete b;
  }
  BlockRecycler(const BlockRecycler&) = delete;
  BlockRecycler& operator=(const BlockRecycler&) = delete;

  // A spare, or a new default Block. The caller sets every placement
  // field. A step of a cache hit (a split makes a Block).
  CACHEALLOC_HOT_INLINE Block* take() {
    if (spares_.empty()) return new Block();
    Block* b = spares_.back();
    spares_.pop_back();
    return b;
  }
  // Makes the next take() unable to throw: keeps one spare ready. For a
  // step that must not fail once it has begun (alloc_found_block's split of
  // a block no index holds). Throws std::bad_alloc, nothing changed.
  void reserve_one() {
    if (spares_.empty()) spares_.push_back(new Block());
  }
  // Gives back a Block from take() that was never linked into a segment (a
  // step after it failed). It is in the spare state, as take() made it.
  void give_back_unused(Block* block) noexcept {
    if (spares_.size() < kMaxSpareBlocks) spares_.push_back(block);
    else delete block;
  }
  // Drops a Block that is no longer part of any segment (a released
  // segment): what it owns (contexts hold Python frames) is released now.
  void recycle(Block* block) {
    if (spares_.size() >= kMaxSpareBlocks) {
      delete block;
      return;
    }
    // Back to a default Block in place, which is in the spare state.
    // Default-initialised (`new Block`, not `Block()`): every member has an
    // initializer; value-initialisation would zero-fill all 128 bytes first.
    std::destroy_at(block);
    ::new (static_cast<void*>(block)) Block;
    spares_.push_back(block);
  }
  // recycle() for a Block that a merge absorbed, a step of a cache hit.
  // Precondition: `block` is free (block.h: !allocated, event_count == 0,
  // stream_uses empty), holds no allocation context (block.h: free blocks
  // hold none; the free path moved the freed block's out) and is not a
  // segment head (it had a lower neighbour), so it holds no segment context
  // either: it is in the spare state already, and resetting it (destroying
  // and rebuilding 128 bytes) costs about 25 instructions per merge.
  CACHEALLOC_HOT_INLINE void recycle_absorbed(Block* block) {
    if (spares_.size() >= kMaxSpareBlocks) [[unlikely]] {
      delete block;
      return;
    }
    spares_.push_back(block);
  }

  // Throws InvariantViolation naming the first spare that is not in the
  // spare state.
  void check() const {
    for (const Block* b : spares_)
      if (b->allocated || b->expandable || b->event_count != 0 || !b->stream_uses.empty() ||
          b->context_when_allocated || b->context_when_segment_allocated)
        block_invariant_broken("spare block is not in the spare state", b);
  }

  static constexpr size_t kMaxSpareBlocks = 4096;

 private:
  std::vector<Block*> spares_;
};

}  // namespace cachealloc
