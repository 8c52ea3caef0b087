// Native's two placement rules for a cached block: which free block serves
// a request (best fit by (stream, size, address), under the oversize rules)
// and whether the block found is cut down to the request. Steps of a cache
// hit, so forced inline; the engine's hot path, the expandable search
// (expandable_blocks.h) and the policy port (policy_engine.h) share them.
// Units: bytes.
#pragma once

#include <cstddef>

#include "allocator/base/hot_inline.h"
#include "allocator/config/config.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/blocks/size_policy.h"

namespace cachealloc {

// native: get_free_block's oversize rules. Whether a free block of
// `found` bytes may not serve a request of `size` rounded bytes: an
// oversize block (>= max_split_size) is not cut down for a small request,
// and serves a large request only if it wastes less than the rounding
// allowance (max_non_split_rounding_size).
CACHEALLOC_HOT_INLINE bool oversize_rules_refuse(size_t size, size_t found,
                                                 const AllocatorConfig& config) {
  if (size < config.max_split_size && found >= config.max_split_size) return true;
  return size >= config.max_split_size && found >= size + config.max_non_split_rounding_size;
}

// native: get_free_block's choice (no expandable blocks). The smallest
// free block of `pool` on `stream` that holds `size` rounded bytes, or
// pool.end() when there is none or the oversize rules refuse it. Pure.
// O(log n) in the pool's free blocks.
CACHEALLOC_HOT_INLINE BlockPool::iterator best_fit(BlockPool& pool, StreamId stream, size_t size,
                                                   const AllocatorConfig& config) {
  auto it = pool.lower_bound(stream, size);
  if (BlockPool::is_end(it) || it->stream != stream) return pool.end();
  if (oversize_rules_refuse(size, it->size, config)) return pool.end();
  return it;
}

// native: should_split (non-expandable; an expandable pool's large half
// has the small pool's rule, block_pool.h). Whether `block`, found for
// `size` rounded bytes, is cut down to the request with the rest cached.
CACHEALLOC_HOT_INLINE bool should_split(const Block* block, size_t size,
                                        const AllocatorConfig& config) {
  const size_t remaining = block->size - size;
  switch (block->pool->split_rule()) {
    case BlockPool::SplitRule::kSmallPool: return remaining >= kMinBlockSize;
    case BlockPool::SplitRule::kLargePool:
      return size < config.max_split_size && remaining > kSmallSize;
    case BlockPool::SplitRule::kNever: return false;  // MemPool(no_split=True)
  }
  return false;
}

}  // namespace cachealloc
