// CacheRelease (cache_release.h): garbage collection, the release steps of
// the OOM retry path, and empty_cache.
#include "allocator/engine/release/cache_release.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "allocator/engine/port/placement_policy.h"

namespace cachealloc {

size_t CacheRelease::collect_above() const {
  return static_cast<size_t>(config_.garbage_collection_threshold *
                             static_cast<double>(segments_.limit().allowed_bytes()));
}

bool CacheRelease::would_collect_garbage() const {
  return garbage_collection_on(segments_.limit(), config_) &&
         segments_.reserved_bytes() > collect_above();
}

void CacheRelease::collect_garbage(const ContextPtr& ctx) {
  const size_t threshold = collect_above();
  if (segments_.reserved_bytes() <= threshold) return;
  const size_t target = segments_.reserved_bytes() - threshold;
  size_t reclaimed = 0;

  size_t total_age = 0;
  int freeable = 0;
  // Blocks of expandable segments are never whole segments (native: always
  // split, an unmapped neighbour at least), so the collector skips them.
  for (const auto& entry : large_.entries()) {
    if (!entry.block->is_split() && !entry.block->expandable) {
      total_age += static_cast<size_t>(large_.age_of(entry.block));
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
    for (const auto& entry : large_.entries()) {
      Block* block = entry.block;
      if (!block->is_split() && !block->expandable &&
          static_cast<double>(large_.age_of(block)) >= age_threshold) {
        victims.push_back(block);
        freed_one = true;
        reclaimed += block->size;
        total_age -= static_cast<size_t>(large_.age_of(block));
        --freeable;
      }
    }
    for (Block* b : victims) segments_.release(b, ctx);
  }
}

bool CacheRelease::release_oversize(BlockPool& pool, StreamId stream, size_t size,
                                    const ContextPtr& ctx) {
  if (config_.max_split_size == AllocatorConfig::kUnlimitedSplit) return false;
  const size_t key_size = std::max(size, config_.max_split_size);
  auto it = pool.lower_bound(stream, key_size);
  // A block of an expandable segment cannot be released whole: native then
  // takes the many-blocks branch, which passes over expandable blocks.
  if (BlockPool::is_end(it) || it->stream != stream || it->block->expandable) {
    if (it == pool.begin()) return false;
    size_t released = 0;
    --it;  // the largest block ordered before the key: same stream or lower
    std::vector<Block*> victims;
    while (released < key_size && it->size >= config_.max_split_size && it->stream == stream) {
      if (!it->block->expandable) {
        victims.push_back(it->block);
        released += it->size;
      }
      if (it == pool.begin()) break;
      --it;
    }
    // Native releases each victim while walking down; releasing afterwards
    // in the same order emits the same events and leaves the same state.
    for (Block* b : victims) segments_.release(b, ctx);
    if (released < key_size) return false;
  } else {
    segments_.release(it->block, ctx);
  }
  return true;
}

bool CacheRelease::release_cached(const ContextPtr& ctx, PoolId id, bool for_user) {
  if (id.is_default() && !pools_.routing()) {
    events_.synchronize_and_free(ctx);
    const bool policy_may_keep = for_user && policy_;
    release_blocks(large_, ctx, policy_may_keep);
    release_blocks(small_, ctx, policy_may_keep);
  }
  pools_.release_freeable(
      id,
      [&](PrivatePool& pool) {
        if (!id.is_default()) events_.synchronize_and_free(ctx, &pool);
        release_blocks(pool.small, ctx);
        release_blocks(pool.large, ctx);
      },
      [&](PrivatePool& pool) {
        // Expandable segments reserved for it with nothing mapped (a
        // mapping the device refused) go with it.
        segments_.release_unmapped(pool.small);
        segments_.release_unmapped(pool.large);
      });
  return true;
}

void CacheRelease::release_blocks(BlockPool& pool, const ContextPtr& ctx, bool policy_may_keep) {
  std::vector<Block*> whole;
  std::vector<Block*> to_unmap;
  for (const auto& entry : pool.entries()) {
    if (entry.block->expandable) to_unmap.push_back(entry.block);
    else if (!entry.block->is_split()) whole.push_back(entry.block);
  }
  for (Block* b : whole) segments_.release(b, ctx);
  // Unmapping one block changes no other cached block (two free blocks are
  // never neighbours), so each is still valid when its turn comes.
  for (Block* b : to_unmap) {
    if (policy_may_keep && !policy_->release_on_empty_cache(b)) continue;
    segments_.unmap(b, ctx);
  }
}

}  // namespace cachealloc
