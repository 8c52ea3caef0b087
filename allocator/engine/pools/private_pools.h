// The private pools of one DeviceCachingAllocator (PyTorch's MemPool and
// CUDA graph pools; what one pool is: private_pool.h): the pools by id,
// their use counts, the routes that send mallocs to them, the use_on_oom
// list, and which pools are freeable.
//
// Invariants (check()):
//   - every use count is >= 0; a pool is in the freeable list exactly when
//     its use count is 0, and at most once;
//   - every route points at an existing pool (a route may outlive its
//     pool's last use, never the pool: release_freeable keeps a routed
//     pool);
//   - each pool's segment_count is the number of segments it holds
//     (check_segment_counts, given the count from the engine's segments);
//   - fast path: FastPath::routing() == routing() (fast_path.h), kept by
//     begin_route and end_route.
//
// Every method that takes an id throws std::invalid_argument for (0, 0),
// which names the default pools; those that need an existing pool throw it
// for an unknown id, naming the id and the device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/strong_hash.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/fast_path.h"
#include "allocator/engine/pools/private_pool.h"

namespace cachealloc {

class PrivatePools {
 public:
  // `fast` (the engine's fast-path flags) must outlive this part.
  PrivatePools(int device, FastPath& fast) : device_(device), fast_(fast) {}
  PrivatePools(const PrivatePools&) = delete;
  PrivatePools& operator=(const PrivatePools&) = delete;

  // Creates pool `id` (use count 1) or adds a use to it. Throws if the pool
  // exists but is freeable (use count 0). `source`: where a new pool's
  // segments come from (null: the device's backend); throws if one is given
  // for a pool that exists.
  void create_or_incref(PoolId id, std::shared_ptr<SegmentSource> source = nullptr);
  // Routes mallocs whose stream `filter` accepts to pool `id` (created if
  // needed; one use is added). Throws if `id` is routed to already.
  void begin_route(PoolId id, PoolFilter filter);
  // Ends the route to `id`; its use count is unchanged. Throws if `id` is
  // not routed to.
  void end_route(PoolId id);
  // Drops one use of pool `id`; at 0 the pool becomes freeable.
  void release(PoolId id);
  void set_use_on_oom(PoolId id, bool use_on_oom);
  void set_no_split(PoolId id);
  // expandable_segments on or off: every pool's large half, and those of
  // pools created later, split as expandable blocks do (block_pool.h).
  void set_expandable_split(bool on);

  bool contains(PoolId id) const { return pools_.contains(id); }
  // The pool named `id`; throws (naming `what`, the caller's operation) for
  // (0, 0) or an unknown id.
  PrivatePool& named(PoolId id, const char* what) const;
  // Whether any route is open.
  bool routing() const { return !routes_.empty(); }
  // native: get_pool's search. The pool of the newest route whose filter
  // accepts `stream`, or null.
  PrivatePool* routed(StreamId stream) const {
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it)
      if (it->second(stream)) return it->first;
    return nullptr;
  }
  bool has_use_on_oom() const { return !use_on_oom_.empty(); }
  // Calls take(PrivatePool&) on each existing use_on_oom pool, in the order
  // they were marked, until one returns a block; returns it, or null.
  template <typename Take>
  Block* first_use_on_oom(Take take) {
    for (const PoolId& id : use_on_oom_) {
      auto it = pools_.find(id);
      if (it == pools_.end()) continue;
      if (Block* block = take(*it->second)) return block;
    }
    return nullptr;
  }
  // native: release_cached_blocks' private pool part. With the default id:
  // every freeable pool, in the order they became freeable; with a pool's
  // id: that pool, if freeable. Calls release(PrivatePool&) on each, then
  // erases it if it holds no segment and no route points at it, calling
  // before_erase(PrivatePool&) first.
  template <typename Release, typename BeforeErase>
  void release_freeable(PoolId id, Release release, BeforeErase before_erase) {
    for (size_t i = 0; i < freeable_.size();) {
      PrivatePool* pool = freeable_[i];
      if (!id.is_default() && pool->id != id) {
        ++i;
        continue;
      }
      release(*pool);
      // A pool still routed to (released by a caller while its route is
      // open) is kept: the route points at it. Native would fail an
      // internal assert at the next routed malloc; here the malloc is
      // served, and the pool is erased by a later empty_cache once the
      // route has ended.
      const bool routed = std::any_of(routes_.begin(), routes_.end(),
                                      [&](const auto& route) { return route.first == pool; });
      if (pool->segment_count == 0 && !routed) {
        before_erase(*pool);
        const PoolId erased = pool->id;
        freeable_.erase(freeable_.begin() + static_cast<std::ptrdiff_t>(i));
        pools_.erase(erased);  // destroys *pool
      } else {
        ++i;
      }
    }
  }
  // Calls fn(const PrivatePool&) for every pool, in no particular order.
  template <typename Fn>
  void for_each(Fn fn) const {
    for (const auto& [id, pool] : pools_) fn(*pool);
  }

  // Throws InvariantViolation for the first broken rule above but the
  // segment counts.
  void check() const;
  // Throws InvariantViolation unless each pool's segment_count equals
  // segments_of[pool] (0 where absent).
  void check_segment_counts(const absl::flat_hash_map<const PrivatePool*, int>& segments_of) const;

 private:
  const int device_;  // for messages
  FastPath& fast_;
  // Owned through pointers: Blocks point at their BlockPools, which must
  // not move.
  // (A StrongHashMap: creating a pool may run out of host memory.)
  StrongHashMap<PoolId, std::unique_ptr<PrivatePool>> pools_;
  // The pools with use count 0, in the order they reached it (empty_cache
  // releases them in this order; native walks a hash map).
  std::vector<PrivatePool*> freeable_;
  // Active routes (begin_route), oldest first; each pool at most once. A
  // routed pool is never erased, even if a caller released its last use
  // while the route was open (release_freeable checks).
  std::vector<std::pair<PrivatePool*, PoolFilter>> routes_;
  // use_on_oom pools, in the order they were marked.
  std::vector<PoolId> use_on_oom_;
  // The expandable_segments setting, for the large halves of new pools.
  bool expandable_split_ = false;
};

}  // namespace cachealloc
