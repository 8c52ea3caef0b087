// The cache-hit path of DeviceCachingAllocator: malloc and free and the
// steps they take when the cache holds a fitting block. A miss and the
// rest are out of line (device_allocator.cc, and the parts it drives).
//
// Why a header: malloc and free are forced inline (CACHEALLOC_HOT_INLINE),
// so the front (caching_allocator.cc) compiles them into its allocate and
// deallocate, which saves two calls with their prologues and epilogues and
// lets the compiler keep values in registers across the steps: about 40
// instructions per allocate+free pair (callgrind, 512 B and 64 MiB).
// The order of checks, splits, merges and emitted events follows native
// PyTorch step for step; comments name the native function each piece
// mirrors. Included at the end of device_allocator.h, not on its own.
#pragma once

#include <cstdint>
#include <utility>

#include "allocator/engine/blocks/best_fit.h"

namespace cachealloc {

// native: malloc
Block* DeviceCachingAllocator::malloc(size_t orig_size, StreamId stream,
                                      const ContextPtr& ctx) {
  if (orig_size > kMaxRequestSize) [[unlikely]] refuse_size(orig_size);
  // Cross-stream frees waiting for events, or expandable segments: rare,
  // out of line.
  if (fast_.slow_reasons()) [[unlikely]] return malloc_slow(orig_size, stream, ctx);

  const size_t size = rounded_request(orig_size);
  BlockPool& pool = pool_for(size, stream);
  BlockPool::iterator slot = get_free_block(pool, stream, size);
  Block* block = found_or_reserved(pool, slot, stream, size, orig_size, ctx);
  return alloc_found_block(pool, block, slot, size, orig_size, ctx, SplitChoice::kByRule);
}

Block* DeviceCachingAllocator::found_or_reserved(BlockPool& pool, BlockPool::iterator& slot,
                                                 StreamId stream, size_t size, size_t orig_size,
                                                 const ContextPtr& ctx) {
  if (!BlockPool::is_end(slot)) [[likely]] return slot->block;
  Block* block = reserve_segment(pool, stream, size, orig_size, ctx);
  slot = pool.end();  // the miss may have released blocks: a fresh end()
  return block;
}

// native: get_free_block.
BlockPool::iterator DeviceCachingAllocator::get_free_block(BlockPool& pool, StreamId stream,
                                                           size_t size) {
  if (gc_active()) pool.count_search();
  return best_fit(pool, stream, size, config_);
}

// native: alloc_found_block. `slot` is block's entry in `pool`, or end()
// for a block in no index. `choice`: malloc splits by should_split's rules
// (a constant there, so the choice costs nothing); a pool restore splits
// as the checkpoint says. Native moves the remainder into the old Block
// object and makes a new one for the front; here the front keeps the object
// (so segment heads are stable) and the remainder is new. Addresses, sizes,
// requested sizes and statistics come out the same.
Block* DeviceCachingAllocator::alloc_found_block(BlockPool& pool, Block* block,
                                                 BlockPool::iterator slot, size_t size,
                                                 size_t orig_size, const ContextPtr& ctx,
                                                 SplitChoice choice, bool expandable_aware) {
  const bool already_split = block->is_split();
  InactiveSplitChange split;
  const bool split_remainder =
      choice == SplitChoice::kByRule ? should_split(block, size, config_)
                                     : choice == SplitChoice::kSplit;
  if (split_remainder) {
    // [block | remaining]: the front goes to the caller, the rest is cached.
    // Every placement field set here (gc_count_base by the pool's insert or
    // replace).
    Block* remaining = segments_.recycler().take();
    remaining->address = block->address + size;
    remaining->size = block->size - size;
    remaining->requested_size = block->requested_size;  // as native's reused object
    remaining->stream = block->stream;
    remaining->pool = block->pool;
    // A spare's flag is false (the spare state), so only the aware path
    // stores it.
    if (expandable_aware) remaining->expandable = block->expandable;
    // The index first: it is the one step that can throw (std::bad_alloc
    // when a split of its tree finds no spare node), and it then leaves the
    // index unchanged; nothing is linked yet, so the engine is unchanged.
    try {
      // No entry: a fresh segment's block, or one taken from a use_on_oom
      // pool, which may not be `pool` (block->pool is the block's own).
      if (BlockPool::is_end(slot)) block->pool->insert(remaining);
      else pool.replace(slot, remaining);  // usually in place: same rank
    } catch (...) {
      segments_.recycler().give_back_unused(remaining);
      throw;
    }
    remaining->prev = block;
    remaining->next = block->next;
    if (remaining->next) remaining->next->prev = remaining;
    block->next = remaining;
    block->size = size;
    if (already_split) {
      split.bytes = -static_cast<int64_t>(block->size);  // shrinks, count same
    } else {
      split.blocks = 1;
      split.bytes = static_cast<int64_t>(remaining->size);
    }
  } else {
    if (!BlockPool::is_end(slot)) pool.erase(slot);
    if (already_split) {
      split.blocks = -1;
      split.bytes = -static_cast<int64_t>(block->size);
    }
  }

  // Native leaves expandable segments out of the inactive split stats.
  if (expandable_aware && block->expandable) split = InactiveSplitChange{};
  block->allocated = true;
  block->requested_size = orig_size;
  // A free block holds no allocation context (block.h): without one from
  // the caller (history off) there is nothing to store.
  if (ctx) block->context_when_allocated = ctx;
  allocated_bytes_ += block->size;

  EngineEvent e = block_event(EventKind::kAlloc, block, config_.max_split_size);
  e.split = split;
  e.context = &ctx;
  observers_.emit(e);
  return block;
}

// native: free
template <typename OnFailure>
void DeviceCachingAllocator::free(Block* block, const ContextPtr& ctx, OnFailure&& on_failure) {
  // The one step of a cache-hit free that can fail (std::bad_alloc for
  // index nodes) comes first, while nothing has changed: the caller still
  // holds the block. merge_and_cache's insert then cannot throw.
  if (!block->pool->reserved_for_insert()) [[unlikely]] {
    try {
      block->pool->reserve_for_insert();
    } catch (...) {
      on_failure(block);
      throw;
    }
  }
  block->allocated = false;
  allocated_bytes_ -= block->size;
  if (block->stream_uses.empty() && !block->expandable) [[likely]] {
    // Back in the cache at once: one kFree event for native's two steps.
    cache_freed_block(block, ctx, EventKind::kFree);
    return;
  }
  try {
    free_slow(block, ctx);  // all or nothing (it puts the block back on failure)
  } catch (...) {
    on_failure(block);
    throw;
  }
}

// native: free_block's body, shared by free() (kFree) and free_block().
Block* DeviceCachingAllocator::cache_freed_block(Block* block, const ContextPtr& ctx,
                                                 EventKind kind, bool expandable_aware) {
  EngineEvent e = block_event(kind, block, config_.max_split_size);
  ContextPtr allocated_ctx = std::move(block->context_when_allocated);
  e.context = ctx ? &ctx : &allocated_ctx;

  BlockPool& pool = *block->pool;
  InactiveSplitChange split;
  Block* merged = merge_and_cache(block, pool, split, expandable_aware);
  if (merged->is_split()) {
    split.blocks += 1;
    split.bytes += static_cast<int64_t>(merged->size);
  }
  // Native leaves expandable segments out of the inactive split stats.
  if (expandable_aware && merged->expandable) split = InactiveSplitChange{};
  e.split = split;
  observers_.emit(e);
  return merged;
}

// native: the two try_merge_blocks calls of free_block (lower neighbour
// first), then the insert into the pool. Each free neighbour absorbed counts
// as one inactive split block of its size leaving. The lower neighbour
// absorbs `block` (native does the reverse) so segment heads keep their
// objects; the merged block keeps the freed block's requested size, as
// native's does. The merged block takes over a merged neighbour's index
// entry (BlockPool::replace), which usually needs no tree restructuring.
// Returns the merged block, indexed.
// Precondition: pool.reserve_for_insert() since the pool's last insert (the
// caller's first step, before it changed anything), so nothing here throws:
// once a neighbour is absorbed, the merge must end with the block indexed.
Block* DeviceCachingAllocator::merge_and_cache(Block* block, BlockPool& pool,
                                               InactiveSplitChange& split,
                                               bool expandable_aware) {
  const size_t requested = block->requested_size;
  Block* const prev = block->prev && block->prev->is_free() ? block->prev : nullptr;
  Block* const next = block->next && block->next->is_free() ? block->next : nullptr;
  // Look entries up while the neighbours' keys are intact. Free blocks are
  // always indexed (block.h), so both lookups find their entry.
  BlockPool::iterator slot = pool.end();
  if (next) {
    if (prev) pool.erase(next);
    else slot = pool.find(next);
  }
  if (prev) slot = pool.find(prev);

  // `lower` takes over its upper neighbour's bytes; `upper` is recycled.
  // The free neighbour absorbed leaves the inactive split stats.
  auto absorb = [&](Block* lower, Block* upper,
                    const Block* free_neighbour) CACHEALLOC_HOT_INLINE_LAMBDA {
    split.blocks -= 1;
    split.bytes -= static_cast<int64_t>(free_neighbour->size);
    lower->size += upper->size;
    lower->next = upper->next;
    if (lower->next) lower->next->prev = lower;
    // Back to the spare state's flag (only expandable blocks have it set).
    if (expandable_aware) upper->expandable = false;
    segments_.recycler().recycle_absorbed(upper);
  };
  if (prev) {
    absorb(prev, block, prev);
    block = prev;
  }
  if (next) absorb(block, next, next);
  block->requested_size = requested;
  // block->context_when_allocated is null already: `block` is the freed
  // block (cache_freed_block moved its context out) or a free neighbour.
  if (BlockPool::is_end(slot)) pool.insert_reserved(block);
  else pool.replace_reserved(slot, block);
  return block;
}
}  // namespace cachealloc
