// Private memory pools: PyTorch's MemPool (torch.cuda.MemPool and
// torch.cuda.use_mem_pool) on one device.
//
// A private pool is a pair of BlockPools (small, large) of its own. While a
// pool is "routed to" (begin_allocate_to_pool with a filter), every malloc
// whose stream the filter accepts is served from that pool only: its free
// blocks are searched and its new segments are reserved into it; the
// default pools are not consulted. A freed block always goes back to the
// pool it came from. So the pool's segments hold only what was allocated
// while it was routed to, and can be given back as a unit.
//
// Lifetime (native's): a pool is created with a use count of 1
// (create_or_incref_pool, or implicitly by begin_allocate_to_pool, which
// also adds one); release_pool drops one. At 0 the pool is "freeable": its
// unsplit cached segments are returned by the next empty_cache (all pools,
// or this one), and once it holds no segment it is erased. Blocks still
// handed out stay valid and return to the freeable pool when freed.
//
// Segments come from the device's backend, or from a SegmentSource of the
// pool's own (PyTorch's MemPool(allocator=...): another allocator's alloc
// and free functions, e.g. ncclMemAlloc or a sleep-mode allocator over
// cuMemCreate). Everything else is the same for both: routing, caching,
// splitting, statistics, snapshots, empty_cache. A source that has no room
// (allocate returns 0) is an out-of-memory error of the request in that
// pool, after the same release-and-retry steps as a device refusal. The
// pool holds its source until it is erased, after its last segment went
// back to that source.
//
// Ids are PyTorch's MempoolId_t: a pair of unsigned 64-bit ints, (0, n) for
// user-created pools, (n, 0) for graph pools; (0, 0) is the default pools
// and never names a private pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "allocator/base/device_backend.h"
#include "allocator/engine/blocks/block_pool.h"

namespace cachealloc {

struct PoolId {
  uint64_t first = 0;
  uint64_t second = 0;

  bool is_default() const { return first == 0 && second == 0; }
  friend bool operator==(const PoolId&, const PoolId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PoolId& id) {
    return H::combine(std::move(h), id.first, id.second);
  }
  // "(first, second)", as Python prints the tuple.
  std::string to_string() const {
    return "(" + std::to_string(first) + ", " + std::to_string(second) + ")";
  }
};

// Decides, for a malloc on `stream`, whether it goes to the routed pool.
// Called under the device's lock, on the allocating thread (PyTorch's
// use_mem_pool passes "is this the thread that entered the context").
using PoolFilter = std::function<bool(StreamId)>;

struct PrivatePool {
  explicit PrivatePool(PoolId pool_id, std::shared_ptr<SegmentSource> source = nullptr)
      : id(pool_id), segment_source(std::move(source)), large(false, this), small(true, this) {}
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;

  const PoolId id;
  // Where the pool's segments come from; null: the device's backend.
  const std::shared_ptr<SegmentSource> segment_source;
  // MemPool objects, use_mem_pool contexts (and, natively, CUDA graphs)
  // that hold the pool. >= 0; 0 means freeable.
  int use_count = 1;
  // Segments reserved into this pool and not yet released. The pool is
  // erased when it is freeable and this reaches 0.
  int segment_count = 0;
  BlockPool large;  // free blocks of the pool's large segments
  BlockPool small;  // free blocks of the pool's small segments
};

}  // namespace cachealloc
