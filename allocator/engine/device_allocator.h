// The caching allocator of one device: PyTorch's DeviceCachingAllocator
// design, with its behaviour kept bit for bit.
//
//  - Requests are rounded (size_policy.h) and served from the small pool
//    (<= 1 MiB, 2 MiB segments) or the large pool.
//  - Best fit by (stream, size, address); a block larger than needed is
//    split when the remainder is worth keeping; freed blocks merge with
//    free neighbours.
//  - Blocks >= max_split_size are never split, and serve only requests
//    within max_non_split_rounding_size of their size.
//  - When the cache has nothing that fits: garbage-collect (if a limit and a
//    threshold are set), reserve a new segment; on failure free oversize
//    cached blocks, retry; free every unsplit cached block, retry; then OOM.
//  - Cross-stream use (record_stream) delays reuse until events complete.
//
// The engine is its parts, composed, and the malloc and free that drive
// them. Each part owns its state, its invariants and their check(), and
// none includes the engine:
//   DeviceSegments   the memory held from the device (whole segments,
//                    expandable segments' pages), reserved bytes, the limit,
//                    segment heads, spare Blocks
//   PrivatePools     MemPool and graph pools, routes, use counts
//   StreamEvents     cross-stream frees: event queues, frees deferred
//                    while a route is open
//   CacheRelease     garbage collection, the OOM path's releases, empty_cache
//   PoolCheckpoints  a private pool's layout saved and put back
//   EngineObservers  who is told of every event
//   FastPath         the flags malloc's hot path tests, each kept by its part
// The engine's own state: the config in force, the default pools, the
// bytes handed out, the placement policy. Its members are defined here,
// in device_allocator.cc and in device_allocator_hot.h, nowhere else.
//
// Not thread-safe: CachingAllocator (caching_allocator.h) serialises calls.
// Costs: malloc/free are O(log n) in the number of cached blocks, plus one
// device call when a segment is reserved or released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocator/base/device_backend.h"
#include "allocator/base/hot_inline.h"
#include "allocator/base/strong_hash.h"
#include "allocator/config/config.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/blocks/fast_path.h"
#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/checkpoints/pool_checkpoint.h"
#include "allocator/engine/checkpoints/pool_checkpoints.h"
#include "allocator/engine/expandable/expandable_segment.h"
#include "allocator/engine/observe/engine_events.h"
#include "allocator/engine/observe/engine_observer.h"
#include "allocator/engine/observe/engine_observers.h"
#include "allocator/engine/pools/private_pool.h"
#include "allocator/engine/pools/private_pools.h"
#include "allocator/engine/port/placement_policy.h"
#include "allocator/engine/port/policy_engine.h"
#include "allocator/engine/release/cache_release.h"
#include "allocator/engine/segments/device_segments.h"
#include "allocator/engine/segments/segment_views.h"
#include "allocator/engine/streams/stream_events.h"

namespace cachealloc {

class DeviceCachingAllocator {
 public:
  // `backend` must outlive the allocator. `config` is copied. `policy`:
  // the placement policy (placement_policy.h), owned; null runs
  // native's decisions on the engine's own inline path. Fixed for the
  // engine's life: a policy's decisions shape the cache it finds.
  DeviceCachingAllocator(int device, const AllocatorConfig& config,
                         DeviceBackend& backend,
                         std::unique_ptr<PlacementPolicy> policy = nullptr);
  ~DeviceCachingAllocator();
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // Observers are not owned and must outlive the allocator (or be removed).
  void add_observer(EngineObserver* observer) { observers_.add(observer); }
  void remove_observer(EngineObserver* observer) { observers_.remove(observer); }

  // Hands out a block of at least `size` bytes for use on `stream`.
  // Throws SizeOverflowError (size > kMaxRequestSize), OutOfMemoryError
  // (after the cache was emptied and the device still refused) or
  // BackendError. On any throw the cache is still consistent; on OOM cached
  // blocks may have been returned to the device, as native does.
  // malloc and free are forced inline into their callers (the front's
  // allocate and deallocate); see device_allocator_hot.h.
  CACHEALLOC_HOT_INLINE Block* malloc(size_t size, StreamId stream,
                                      const ContextPtr& context = nullptr);
  // Takes a block back. Precondition: `block` came from malloc() and was not
  // freed since (CachingAllocator checks pointers before calling this).
  // All or nothing: throws std::bad_alloc (index nodes, stream events'
  // queues) or BackendError (recording a stream event) with nothing
  // changed, the block still allocated; `on_failure(block)` runs first, for
  // a caller that let go of its own record of the block before the call
  // (the front's pointer table). Its catch sits only around the two steps
  // that can throw, so the cache-hit path keeps nothing alive for it.
  template <typename OnFailure>
  CACHEALLOC_HOT_INLINE void free(Block* block, const ContextPtr& context, OnFailure&& on_failure);
  CACHEALLOC_HOT_INLINE void free(Block* block, const ContextPtr& context = nullptr) {
    free(block, context, [](Block*) {});
  }
  // Marks `block` as used on `stream` too (StreamEvents::record_use).
  void record_stream(Block* block, StreamId stream) { events_.record_use(block, stream); }

  // Returns every unsplit cached segment of the default pools to the device
  // (after waiting for outstanding cross-stream events; skipped while a
  // private pool is routed to, as native), and those of every freeable
  // private pool. With a private pool's id: only that pool's, if it is
  // freeable (PyTorch's emptyCache(mempool_id)).
  void empty_cache(const ContextPtr& context = nullptr, PoolId pool = {}) {
    release_.release_cached(context, pool, /*for_user=*/true);
  }

  // --- Private pools: PyTorch's MemPool (private_pool.h, private_pools.h).
  // Each throws std::invalid_argument for the id (0, 0), and those that
  // need an existing pool throw it for an unknown id, naming the id.
  //
  // Creates pool `id` (use count 1) or adds a use to it. Throws if the pool
  // exists but is freeable (use count 0). `source`: where a new pool's
  // segments come from (null: the device's backend; private_pool.h); throws
  // if one is given for a pool that exists.
  void create_or_incref_pool(PoolId id, std::shared_ptr<SegmentSource> source = nullptr) {
    pools_.create_or_incref(id, std::move(source));
  }
  // Routes every malloc whose stream `filter` accepts to pool `id` (created
  // if needed; one use is added) until end_allocate_to_pool(id). The newest
  // route is tried first. Throws if `id` is routed to already.
  void begin_allocate_to_pool(PoolId id, PoolFilter filter) {
    pools_.begin_route(id, std::move(filter));
  }
  // Ends the route to `id`; its use count is unchanged. Throws if `id` is
  // not routed to.
  void end_allocate_to_pool(PoolId id) { pools_.end_route(id); }
  // Drops one use of pool `id`; at 0 the pool becomes freeable (empty_cache
  // returns its cached segments; it is erased once it holds none).
  void release_pool(PoolId id) { pools_.release(id); }
  // The pool's use count. Throws for an unknown id.
  int pool_use_count(PoolId id) const { return pools_.named(id, "pool_use_count").use_count; }
  // MemPool(use_on_oom=True): when a request to the default pools finds no
  // cached block and the device refuses a new segment, a cached block of
  // this pool may serve it (before any cached segment is released).
  void set_use_on_oom(PoolId id, bool use_on_oom) { pools_.set_use_on_oom(id, use_on_oom); }
  // MemPool(no_split=True): the pool's blocks are handed out whole. Cannot
  // be undone (native has no way to clear it either).
  void set_no_split(PoolId id) { pools_.set_no_split(id); }
  // Whether pool `id` exists on this device.
  bool has_pool(PoolId id) const { return pools_.contains(id); }

  // --- Pool checkpoints: PyTorch's cudagraph trees (pool_checkpoints.h,
  // which says what each does and how it fails).
  PoolCheckpoint checkpoint_pool(PoolId id, const ContextPtr& context = nullptr) {
    return checkpoints_.checkpoint(id, context);
  }
  // The frees and carves of a restore are this engine's free and
  // hand-out, so statistics and history see them. std::bad_alloc can come
  // part way (CachingAllocator::restore_pool keeps its table right then).
  PoolRestore restore_pool(const PoolCheckpoint& checkpoint, const ContextPtr& context = nullptr);
  bool pool_allocations_are(PoolId id, const StrongHashSet<uintptr_t>& expected) const {
    return checkpoints_.allocations_are(id, expected);
  }
  std::vector<uintptr_t> pool_allocations(PoolId id) const {
    return checkpoints_.allocations(id);
  }

  // Limits reserved bytes to floor(fraction * device capacity); 1.0 removes
  // the limit (native's rule). Throws ConfigError outside [0, 1].
  void set_memory_fraction(double fraction);
  // Limits reserved bytes to `bytes` directly.
  void set_memory_limit(size_t bytes) { segments_.limit().set_bytes(bytes); }
  const MemoryLimit& memory_limit() const { return segments_.limit(); }

  // --- Expandable segments (expandable_segments:True; the part
  // expandable_blocks.h, inside DeviceSegments).
  // Turns the setting on or off at run time, as native's
  // _set_allocator_settings does: on, new memory is mapped into expandable
  // segments and large blocks split whenever 512 bytes would remain; off,
  // new memory comes as whole segments again and free blocks of expandable
  // segments are no longer reused (they are still unmapped by empty_cache).
  void set_expandable_segments(bool on);
  bool expandable_segments() const { return segments_.expandable().on(); }
  // The expandable segments reserved now, in address order.
  const std::vector<std::unique_ptr<ExpandableSegment>>& expandable_segment_list() const {
    return segments_.expandable().segments();
  }

  // Size of the largest cached free block (PyTorch's cacheInfo), bytes.
  size_t largest_cached_block() const;
  // Start address and total bytes of the segment that holds `block`.
  // Throws InvalidPointerError for a block of an expandable segment (as
  // native: such memory cannot be shared by an IPC handle).
  uintptr_t base_allocation(const Block* block, size_t* segment_bytes) const;
  // DeviceBackend::share_pages for an allocated block in an expandable
  // segment; returns the first shared page's address.
  uintptr_t share_expandable(const Block* block, std::string* out) {
    return backend_.share_pages(device_, block->address, block->size, out);
  }

  // Bytes reserved from the device now.
  size_t reserved_bytes() const { return segments_.reserved_bytes(); }
  // Bytes of the blocks handed out and not yet freed by the caller.
  size_t allocated_bytes() const { return allocated_bytes_; }
  // Whether no block is in use: none handed out (each has >= 512 bytes, so
  // allocated_bytes_ counts them) and none freed but waiting for stream
  // events (each waits in events_ until its last event completes, or, if
  // freed while a route was open, until the routes end).
  bool idle() const { return allocated_bytes_ == 0 && !fast_.has(FastPath::kStreamWork); }
  int device() const { return device_; }
  // The config in force: as given, shaped by the policy if there is one.
  const AllocatorConfig& config() const { return config_; }
  // The placement policy; null: native.
  const PlacementPolicy* policy() const { return policy_.get(); }
  // Puts `config` in force for later requests (run-time settings; see
  // AllocatorConfig::with_settings). Cached blocks stay as they are, as in
  // native, which reads its settings at each use; the memory limit is not
  // touched (per_process_memory_fraction acts at construction only).
  void apply_config(const AllocatorConfig& config) { put_in_force(shaped(config)); }
  // apply_config's two steps, for a caller that changes several engines
  // all or nothing: the config apply_config(given) would put in force
  // (throws std::bad_alloc copying it, nothing changed), then putting that
  // in force (never throws).
  AllocatorConfig shaped(const AllocatorConfig& given) const;
  void put_in_force(AllocatorConfig&& config) noexcept;
  // Whether malloc(size, stream) would be served from the cache right now,
  // without touching the device. Pure: changes nothing.
  bool would_hit_cache(size_t size, StreamId stream) const;
  // Whether reserving a segment for malloc(size) would pass the memory limit.
  bool would_exceed_limit(size_t size) const;
  // Whether a miss for malloc(size) would garbage-collect first.
  bool would_collect_garbage() const { return release_.would_collect_garbage(); }

  // Segments in address order.
  std::vector<SegmentView> segments() const { return segments_.views(); }
  // Throws InvariantViolation describing the first broken rule (block.h and
  // every part's).
  void check_invariants() const;
  // Events some observer dropped because host memory ran out
  // (engine_observers.h).
  uint64_t observer_failures() const { return observers_.failures(); }
  // A policy's after_free steps that failed after their free was done
  // (free_slow): their pages stay cached.
  uint64_t policy_failures() const { return policy_failures_; }

 private:
  // malloc with stream work pending, expandable segments present or a
  // policy set: the same steps as malloc, out of line, with the expandable
  // search and the policy's hooks.
  Block* malloc_slow(size_t orig_size, StreamId stream, const ContextPtr& ctx);
  // free of a block used on other streams or in an expandable segment.
  void free_slow(Block* block, const ContextPtr& ctx);
  // The block `slot` found in `pool`, else (slot is end()) a new segment's
  // from reserve_segment, with `slot` set to a fresh end() (the miss may
  // have released blocks). The one place malloc's two paths choose.
  CACHEALLOC_HOT_INLINE Block* found_or_reserved(BlockPool& pool, BlockPool::iterator& slot,
                                                 StreamId stream, size_t size, size_t orig_size,
                                                 const ContextPtr& ctx);
  // native: get_free_block. best_fit (best_fit.h), counted for the
  // collector's ages when it is on. The block is left indexed:
  // alloc_found_block re-indexes the entry for the remainder or erases it,
  // whichever the split decision needs.
  CACHEALLOC_HOT_INLINE BlockPool::iterator get_free_block(BlockPool& pool, StreamId stream,
                                                           size_t size);
  // Throws SizeOverflowError for a request of `size` bytes.
  [[noreturn]] static void refuse_size(size_t size);
  // malloc's miss, out of line: reserves a segment for a request of `size`
  // rounded (`orig_size` asked) bytes from `pool` (collecting garbage,
  // trying use_on_oom pools and emptying the cache as needed) and returns
  // its block, unindexed (a use_on_oom pool's cached block is taken out of
  // that pool's index); or raises OOM. Invalidates iterators into the pools.
  Block* reserve_segment(BlockPool& pool, StreamId stream, size_t size, size_t orig_size,
                         const ContextPtr& ctx);
  // native: try_mempool_fallback. A cached block of a use_on_oom pool that
  // fits the request (r.pool is a default pool), taken out of its pool's
  // index; or null.
  Block* take_use_on_oom_block(const MissRequest& r);
  // native: alloc_block: DeviceSegments::allocate; with a policy, its
  // on_miss instead (after the retry event, which is the engine's).
  Block* alloc_block(const MissRequest& r, const ContextPtr& ctx);
  // Whether alloc_found_block cuts the block down to the request: by
  // should_split's rules (malloc), or as a policy or a pool checkpoint says.
  enum class SplitChoice : uint8_t { kByRule, kSplit, kWhole };
  // Hands out `block` for a request of `size` rounded bytes. `slot` is
  // block's entry in `pool`'s free index (pool.end() for a fresh segment's
  // block, which is in no index).
  // `expandable_aware`: false on the hot path, where no block is
  // expandable (a constant there: it costs nothing); true out of line, where
  // an expandable block's split is left out of the inactive split stats (as
  // native) and its remainder is marked expandable.
  CACHEALLOC_HOT_INLINE Block* alloc_found_block(BlockPool& pool, Block* block,
                                                 BlockPool::iterator slot, size_t size,
                                                 size_t orig_size, const ContextPtr& ctx,
                                                 SplitChoice choice,
                                                 bool expandable_aware = false);
  [[noreturn]] void raise_oom(const MissRequest& r, size_t orig_size, const ContextPtr& ctx);
  // Caches a block whose stream events are done (kFreeCompleted), for
  // StreamEvents. Precondition: block->pool->reserve_for_insert() since the
  // last insert into its pool; then it never throws.
  void free_block(Block* block, const ContextPtr& ctx);
  // Caches a freed block (merging it with free neighbours) and emits `kind`:
  // kFree straight from free(), kFreeCompleted from free_block. Returns the
  // merged free block. `expandable_aware` as for alloc_found_block.
  CACHEALLOC_HOT_INLINE Block* cache_freed_block(Block* block, const ContextPtr& ctx,
                                               EventKind kind,
                                               bool expandable_aware = false);
  // Merges `block` with its free neighbours and indexes the result.
  CACHEALLOC_HOT_INLINE Block* merge_and_cache(Block* block, BlockPool& pool,
                                               InactiveSplitChange& split,
                                               bool expandable_aware = false);
  // What the policy's hooks may do to this engine during one operation:
  // the parts' interfaces (policy_engine.h), never the engine's privates.
  // Precondition: a policy is set.
  PolicyEngine policy_engine(const ContextPtr& ctx);

  // round_request_size(size, config_).
  size_t rounded_request(size_t size) const {
    return power2_divisions_ ? round_request_size(size, config_) : round_to_min_blocks(size);
  }
  BlockPool& pool_for(size_t rounded) {
    return rounded <= kSmallSizeForPool ? small_blocks_ : large_blocks_;
  }
  // native: get_pool. The pool a malloc of `rounded` bytes on `stream`
  // searches: that of the newest route whose filter accepts the stream, or
  // the default one.
  BlockPool& pool_for(size_t rounded, StreamId stream) {
    if (!fast_.routing()) [[likely]] return pool_for(rounded);
    return routed_pool(rounded, stream);
  }
  BlockPool& routed_pool(size_t rounded, StreamId stream);
  bool gc_active() const { return garbage_collection_on(segments_.limit(), config_); }

  static constexpr size_t kSmallSizeForPool = 1048576;

  const int device_;
  AllocatorConfig config_;
  // has_power2_divisions(config_), decided when the config is set: without
  // divisions (the default) malloc rounds with round_to_min_blocks.
  bool power2_divisions_;
  DeviceBackend& backend_;
  EngineObservers observers_{device_};
  // Why malloc leaves the hot path, and whether a route is open: each flag
  // kept by its part (fast_path.h).
  FastPath fast_;
  // The placement policy; null: native (placement_policy.h).
  std::unique_ptr<PlacementPolicy> policy_;
  // After-free steps of the policy that failed (policy_failures()).
  uint64_t policy_failures_ = 0;

  BlockPool large_blocks_{false};  // free blocks of large segments
  BlockPool small_blocks_{true};   // free blocks of small segments
  size_t allocated_bytes_ = 0;     // sum of allocated blocks' sizes

  // The parts (see the top of this file).
  PrivatePools pools_{device_, fast_};
  DeviceSegments segments_{device_, backend_, config_, observers_, fast_};
  StreamEvents events_{device_, backend_, config_, observers_, fast_,
                       [this](Block* block, const ContextPtr& ctx) { free_block(block, ctx); }};
  CacheRelease release_{config_, segments_, large_blocks_, small_blocks_,
                        pools_,  events_,   policy_.get()};
  PoolCheckpoints checkpoints_{device_, pools_, segments_, events_};
};

}  // namespace cachealloc

#include "allocator/engine/device_allocator_hot.h"
