// Giving cached memory back to the device: garbage collection (under a
// memory limit with garbage_collection_threshold set), the two release
// steps of a miss's retry path (oversize blocks, then everything), and the
// user's empty_cache. Native's garbage_collect_cached_blocks,
// release_available_cached_blocks, release_cached_blocks and release_blocks,
// step for step, over the engine's parts.
//
// It keeps no state of its own: it decides which cached blocks go and asks
// DeviceSegments to return them. Its rules (what check_invariants then
// finds true):
//   - only free, indexed blocks are released or unmapped, never a block
//     handed out or waiting for stream events;
//   - a whole segment goes only when it is one unsplit free block (a split
//     segment stays; an expandable segment's blocks give back whole free
//     pages instead, and never to the collector);
//   - reserved bytes drop by exactly the bytes released (DeviceSegments
//     counts them), each release emitted in native's order;
//   - the default pools are emptied only while no private pool is routed
//     to, after waiting for every stream (a capture may be underway).
// Costs: O(free blocks of the pools walked) plus one device call per
// segment released or block unmapped.
#pragma once

#include <cstddef>

#include "allocator/config/config.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/pools/private_pools.h"
#include "allocator/engine/segments/device_segments.h"
#include "allocator/engine/streams/stream_events.h"

namespace cachealloc {

class PlacementPolicy;

// native: whether a request's miss collects garbage first: a memory limit
// is set and garbage_collection_threshold > 0. Inline: a malloc's search
// counts itself for the collector's ages only then.
inline bool garbage_collection_on(const MemoryLimit& limit, const AllocatorConfig& config) {
  return limit.is_set() && config.garbage_collection_threshold > 0.0;
}

class CacheRelease {
 public:
  // The parts it releases from; each must outlive this. `large` and
  // `small`: the default pools. `policy`: the placement policy, or null
  // (native).
  CacheRelease(const AllocatorConfig& config, DeviceSegments& segments, BlockPool& large,
               BlockPool& small, PrivatePools& pools, StreamEvents& events,
               const PlacementPolicy* policy)
      : config_(config),
        segments_(segments),
        large_(large),
        small_(small),
        pools_(pools),
        events_(events),
        policy_(policy) {}
  CacheRelease(const CacheRelease&) = delete;
  CacheRelease& operator=(const CacheRelease&) = delete;

  // Whether a miss now would collect garbage first (reserved bytes above
  // threshold * allowed bytes).
  bool would_collect_garbage() const;
  // native: garbage_collect_cached_blocks. Frees unsplit large cached
  // blocks of the default large pool older than the average age until
  // reserved bytes are back under threshold * allowed, without waiting for
  // streams. Precondition: garbage_collection_on().
  void collect_garbage(const ContextPtr& ctx);
  // native: release_available_cached_blocks. With max_split_size set, frees
  // the smallest oversize cached block of `pool` on `stream` that covers a
  // request of `size` rounded bytes, or else the largest oversize blocks on
  // the stream until enough bytes were freed. Returns whether enough was.
  bool release_oversize(BlockPool& pool, StreamId stream, size_t size, const ContextPtr& ctx);
  // native: release_cached_blocks. With the default id: the default pools
  // (large, then small; only while no private pool is routed to) and then
  // every freeable private pool. With a private pool's id: that pool only,
  // if it is freeable. A freeable pool is released small half first, and
  // erased once it holds no segment. `for_user`: the user's empty_cache,
  // where a policy may keep some of the default pools' pages mapped; never
  // on the OOM path, and never in a released private pool (it is gone: it
  // gives back all it holds, or it and its memory would stay until an
  // OOM). Returns true (native's signature).
  bool release_cached(const ContextPtr& ctx, PoolId id = {}, bool for_user = false);

 private:
  // native: release_blocks. Frees every unsplit cached segment of `pool`,
  // then unmaps the whole free pages of every cached block of an
  // expandable segment (in the pool's order), returning segments left with
  // nothing mapped. `policy_may_keep`: the policy's release_on_empty_cache
  // decides per block of mapped memory.
  void release_blocks(BlockPool& pool, const ContextPtr& ctx, bool policy_may_keep = false);
  // Reserved bytes above which the collector runs: threshold * allowed.
  size_t collect_above() const;

  const AllocatorConfig& config_;
  DeviceSegments& segments_;
  BlockPool& large_;
  BlockPool& small_;
  PrivatePools& pools_;
  StreamEvents& events_;
  const PlacementPolicy* const policy_;
};

}  // namespace cachealloc
