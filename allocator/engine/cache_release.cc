// Giving cached memory back to the device: garbage collection, the two
// release steps of the OOM retry path, and empty_cache.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "allocator/engine/device_allocator.h"
#include "allocator/base/errors.h"

namespace cachealloc {

// native: release_block. Returns one whole unsplit cached segment. The
// segment goes back first: if its source fails (a pool's own allocator can),
// the segment stays cached and nothing was recorded.
void DeviceCachingAllocator::release_block(Block* block, const ContextPtr& ctx) {
  segment_source(*block->pool).release(device_, block->address, block->size);
  EngineEvent e = segment_event(EventKind::kSegmentFree, *block->pool, block->stream,
                                block->address, block->size, config_.max_split_size,
                                ctx ? &ctx : &block->context_when_segment_allocated);
  emit(e);

  reserved_bytes_ -= block->size;
  if (PrivatePool* owner = block->pool->owner()) --owner->segment_count;
  block->pool->erase(block);
  segment_heads_.erase(block);
  recycler_.recycle(block);
}

// native: garbage_collect_cached_blocks. Frees unsplit large cached blocks
// older than the average age until reserved memory is back under
// threshold * allowed, without synchronizing streams.
void DeviceCachingAllocator::garbage_collect_cached_blocks(const ContextPtr& ctx) {
  const auto threshold = static_cast<size_t>(
      config_.garbage_collection_threshold *
      static_cast<double>(limit_.allowed_bytes()));
  if (reserved_bytes_ <= threshold) return;
  const size_t target = reserved_bytes_ - threshold;
  size_t reclaimed = 0;

  size_t total_age = 0;
  int freeable = 0;
  // Blocks of expandable segments are never whole segments (native: always
  // split, an unmapped neighbour at least), so the collector skips them.
  for (const auto& entry : large_blocks_.entries()) {
    if (!entry.block->is_split() && !entry.block->expandable) {
      total_age += static_cast<size_t>(large_blocks_.age_of(entry.block));
      ++freeable;
    }
  }
  if (freeable == 0) return;

  bool freed_one = true;
  while (reclaimed < target && freed_one && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / freeable;
    freed_one = false;
    // Releasing a whole segment changes no other block's age or split
    // state, so collecting this pass's victims first and releasing them in
    // index order is the same as native's release-while-iterating.
    std::vector<Block*> victims;
    for (const auto& entry : large_blocks_.entries()) {
      Block* block = entry.block;
      if (!block->is_split() && !block->expandable &&
          static_cast<double>(large_blocks_.age_of(block)) >= age_threshold) {
        victims.push_back(block);
        freed_one = true;
        reclaimed += block->size;
        total_age -= static_cast<size_t>(large_blocks_.age_of(block));
        --freeable;
      }
    }
    for (Block* b : victims) release_block(b, ctx);
  }
}

// native: release_available_cached_blocks. With max_split_size set, frees
// the smallest oversize cached block that covers the request, or else the
// largest oversize blocks on the stream until enough bytes were freed.
bool DeviceCachingAllocator::release_available_cached_blocks(const Request& r,
                                                             const ContextPtr& ctx) {
  if (config_.max_split_size == AllocatorConfig::kUnlimitedSplit) return false;
  BlockPool& pool = *r.pool;
  const size_t key_size = std::max(r.size, config_.max_split_size);
  auto it = pool.lower_bound(r.stream, key_size);
  // A block of an expandable segment cannot be released whole: native then
  // takes the many-blocks branch, which passes over expandable blocks.
  if (BlockPool::is_end(it) || it->stream != r.stream || it->block->expandable) {
    if (it == pool.begin()) return false;
    size_t released = 0;
    --it;  // the largest block ordered before the key: same stream or lower
    std::vector<Block*> victims;
    while (released < key_size && it->size >= config_.max_split_size &&
           it->stream == r.stream) {
      if (!it->block->expandable) {
        victims.push_back(it->block);
        released += it->size;
      }
      if (it == pool.begin()) break;
      --it;
    }
    // Native releases each victim while walking down; releasing afterwards
    // in the same order emits the same events and leaves the same state.
    for (Block* b : victims) release_block(b, ctx);
    if (released < key_size) return false;
  } else {
    release_block(it->block, ctx);
  }
  return true;
}

// native: release_cached_blocks. With the default id: the default pools
// (large, then small; only while no private pool is routed to, since it
// waits for every stream) and then every freeable private pool. With a
// private pool's id: that pool only, if it is freeable. A freeable pool is
// released small half first, and erased once it holds no segment.
// for_user: the user's empty_cache, where a policy may keep some of the
// default pools' pages mapped (release_blocks); never on the OOM path, and
// never in a released private pool: it is gone (no request reaches it
// again) and gives back all it holds, or it and its memory would stay
// until an OOM.
bool DeviceCachingAllocator::release_cached_blocks(const ContextPtr& ctx, PoolId id,
                                                   bool for_user) {
  if (id.is_default() && !pools_.routing()) {
    synchronize_and_free_events(ctx);
    const bool policy_may_keep = for_user && policy_;
    release_blocks(large_blocks_, ctx, policy_may_keep);
    release_blocks(small_blocks_, ctx, policy_may_keep);
  }
  pools_.release_freeable(
      id,
      [&](PrivatePool& pool) {
        if (!id.is_default()) synchronize_and_free_events(ctx, &pool);
        release_blocks(pool.small, ctx);
        release_blocks(pool.large, ctx);
      },
      [&](PrivatePool& pool) {
        // Expandable segments reserved for it with nothing mapped (a
        // mapping the device refused) go with it.
        const RefreshAtExit refresh(*this);
        expandable_.release_unmapped(pool.small);
        expandable_.release_unmapped(pool.large);
      });
  return true;
}

// native: release_blocks. Frees every unsplit cached segment of the pool,
// then unmaps the whole free pages of every cached block of an expandable
// segment (in the pool's order), returning segments left with nothing
// mapped. policy_may_keep: the policy's release_on_empty_cache decides per
// block of mapped memory (a policy is set).
void DeviceCachingAllocator::release_blocks(BlockPool& pool, const ContextPtr& ctx,
                                            bool policy_may_keep) {
  std::vector<Block*> whole;
  std::vector<Block*> to_unmap;
  for (const auto& entry : pool.entries()) {
    if (entry.block->expandable) to_unmap.push_back(entry.block);
    else if (!entry.block->is_split()) whole.push_back(entry.block);
  }
  for (Block* b : whole) release_block(b, ctx);
  // Unmapping one block changes no other cached block (two free blocks are
  // never neighbours), so each is still valid when its turn comes.
  const RefreshAtExit refresh(*this);  // segments left with nothing mapped go
  for (Block* b : to_unmap) {
    if (policy_may_keep && !policy_->release_on_empty_cache(b)) continue;
    expandable_.unmap(b, ctx, [this](const auto& change) { account_pages(change); });
  }
}

void DeviceCachingAllocator::empty_cache(const ContextPtr& ctx, PoolId pool) {
  release_cached_blocks(ctx, pool, /*for_user=*/true);
}

}  // namespace cachealloc
