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
// Not thread-safe: CachingAllocator (caching_allocator.h) serialises calls.
// Costs: malloc/free are O(log n) in the number of cached blocks, plus one
// device call when a segment is reserved or released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/hot_inline.h"
#include "allocator/base/strong_hash.h"
#include "allocator/config/config.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/block.h"
#include "allocator/engine/block_pool.h"
#include "allocator/engine/block_recycler.h"
#include "allocator/engine/engine_events.h"
#include "allocator/engine/engine_observer.h"
#include "allocator/engine/expandable_blocks.h"
#include "allocator/engine/expandable_segment.h"
#include "allocator/engine/pool_checkpoint.h"
#include "allocator/engine/private_pool.h"
#include "allocator/engine/private_pools.h"
#include "allocator/engine/segment_heads.h"
#include "allocator/engine/segment_views.h"
#include "allocator/engine/size_policy.h"
#include "allocator/engine/stream_events.h"
#include "allocator/policy/placement_policy.h"

namespace cachealloc {

class DeviceCachingAllocator {
 public:
  // `backend` must outlive the allocator. `config` is copied. `policy`:
  // the placement policy (policy/placement_policy.h), owned; null runs
  // native's decisions on the engine's own inline path. Fixed for the
  // engine's life: a policy's decisions shape the cache it finds.
  DeviceCachingAllocator(int device, const AllocatorConfig& config,
                         DeviceBackend& backend,
                         std::unique_ptr<PlacementPolicy> policy = nullptr);
  ~DeviceCachingAllocator();
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // Observers are not owned and must outlive the allocator (or be removed).
  void add_observer(EngineObserver* observer);
  void remove_observer(EngineObserver* observer);

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
  // Marks `block` as used on `stream` too: its memory is not reused before
  // the work queued on `stream` at free() time has finished. While a
  // private pool is routed to (a CUDA graph may be capturing), the use is
  // also noted as made during the route (stream_events.h).
  void record_stream(Block* block, StreamId stream);

  // Returns every unsplit cached segment of the default pools to the device
  // (after waiting for outstanding cross-stream events; skipped while a
  // private pool is routed to, as native), and those of every freeable
  // private pool. With a private pool's id: only that pool's, if it is
  // freeable (PyTorch's emptyCache(mempool_id)).
  void empty_cache(const ContextPtr& context = nullptr, PoolId pool = {});

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
    refresh_fast_path();
  }
  // Ends the route to `id`; its use count is unchanged. Throws if `id` is
  // not routed to.
  void end_allocate_to_pool(PoolId id) {
    pools_.end_route(id);
    refresh_fast_path();
  }
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

  // --- Pool checkpoints: PyTorch's cudagraph trees (pool_checkpoint.h;
  // pool_checkpoints.cc). Each throws std::invalid_argument, changing
  // nothing, for an unknown pool or one released to use count 0, naming it.
  //
  // The layout of pool `id`'s segments: each block's address, size and
  // whether it is allocated. Inserts deferred events first, as native (even
  // when it then refuses). Throws if a block still waits for stream events.
  PoolCheckpoint checkpoint_pool(PoolId id, const ContextPtr& context = nullptr);
  // Puts the pool back into `checkpoint`'s layout: frees every block
  // allocated in the pool, carves the checkpoint's blocks out again and
  // frees those it had free (statistics and history see those mallocs and
  // frees, as native's). Returns the addresses freed and the blocks left
  // allocated, which the caller now holds. Throws std::invalid_argument,
  // before changing anything, if a checkpointed segment is gone or differs
  // (stream, pool kind, bytes; blocks that do not tile it or two free
  // neighbours), or a block of the pool waits for events or was used on
  // other streams. Only std::bad_alloc can come later, with the pool part
  // way (CachingAllocator::restore_pool keeps its table right then).
  PoolRestore restore_pool(const PoolCheckpoint& checkpoint, const ContextPtr& context = nullptr);
  // Whether the blocks allocated in pool `id` are exactly those at
  // `expected` (native's checkPoolLiveAllocations).
  bool pool_allocations_are(PoolId id, const StrongHashSet<uintptr_t>& expected) const;
  // The addresses of the blocks allocated in pool `id`, in address order.
  std::vector<uintptr_t> pool_allocations(PoolId id) const;
  // Limits reserved bytes to floor(fraction * device capacity); 1.0 removes
  // the limit (native's rule). Throws ConfigError outside [0, 1].
  void set_memory_fraction(double fraction);
  // Limits reserved bytes to `bytes` directly.
  void set_memory_limit(size_t bytes);
  const MemoryLimit& memory_limit() const { return limit_; }

  // --- Expandable segments (expandable_segments:True; the part
  // expandable_blocks.h).
  // Turns the setting on or off at run time, as native's
  // _set_allocator_settings does: on, new memory is mapped into expandable
  // segments and large blocks split whenever 512 bytes would remain; off,
  // new memory comes as whole segments again and free blocks of expandable
  // segments are no longer reused (they are still unmapped by empty_cache).
  void set_expandable_segments(bool on);
  bool expandable_segments() const { return expandable_.on(); }
  // The expandable segments reserved now, in address order.
  const std::vector<std::unique_ptr<ExpandableSegment>>& expandable_segment_list() const {
    return expandable_.segments();
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
  size_t reserved_bytes() const { return reserved_bytes_; }
  // Bytes of the blocks handed out and not yet freed by the caller.
  size_t allocated_bytes() const { return allocated_bytes_; }
  // Whether no block is in use: none handed out (each has >= 512 bytes, so
  // allocated_bytes_ counts them) and none freed but waiting for stream
  // events (each waits in events_ until its last event completes, or, if
  // freed while a route was open, until the routes end).
  bool idle() const { return allocated_bytes_ == 0 && !(malloc_slow_ & kStreamWork); }
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
  bool would_collect_garbage() const;

  // Segments in address order.
  std::vector<SegmentView> segments() const;
  // Throws InvariantViolation describing the first broken rule (block.h).
  void check_invariants() const;
  // Events some observer dropped because host memory ran out (see emit).
  uint64_t observer_failures() const { return observer_failures_; }
  // A policy's after_free steps that failed after their free was done
  // (free_slow): their pages stay cached.
  uint64_t policy_failures() const { return policy_failures_; }

 private:
  // The policy's hooks reach the engine's steps through PolicyEngine only.
  friend class PolicyEngine;

  // A request that missed the cache, for the miss path (reserve_segment).
  // The hit path keeps these values in locals: a struct whose address
  // reaches the out-of-line miss path would live in memory on the hit path
  // too.
  struct Request {
    size_t size = 0;        // rounded bytes
    size_t alloc_size = 0;  // segment bytes if a new segment is needed
    StreamId stream = 0;
    BlockPool* pool = nullptr;
    Block* block = nullptr;  // result
  };

  // malloc with stream work pending or expandable segments present: the
  // same steps as malloc, out of line, with the expandable search.
  Block* malloc_slow(size_t orig_size, StreamId stream, const ContextPtr& ctx);
  // free of a block used on other streams or in an expandable segment.
  void free_slow(Block* block, const ContextPtr& ctx);
  // malloc path. The steps of a cache hit (device_allocator_hot.h) are
  // forced inline into malloc and free (CACHEALLOC_HOT_INLINE): as calls,
  // their prologues and epilogues cost about 80 instructions per
  // allocate+free pair. The rest is in device_allocator.cc, out of line.
  CACHEALLOC_HOT_INLINE BlockPool::iterator find_free_block(BlockPool& pool, StreamId stream,
                                                            size_t size) const;
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
  Block* take_use_on_oom_block(const Request& r);
  // native: alloc_block; with a policy, its on_miss instead (after the
  // retry event, which is the engine's).
  bool alloc_block(Request& r, bool is_retry, const ContextPtr& ctx);
  // native: alloc_block's body: a segment or mapped pages for r, within the
  // limit (checked with the whole-segment size).
  bool native_alloc_block(Request& r, const ContextPtr& ctx);
  // malloc_slow's placement with a policy: its find_cached, the engine's
  // miss path (whose alloc_block asks the policy), its should_split.
  Block* malloc_with_policy(BlockPool& pool, StreamId stream, size_t size, size_t orig_size,
                            const ContextPtr& ctx);
  CACHEALLOC_HOT_INLINE bool should_split(const Block* block, size_t size) const;
  // Whether alloc_found_block cuts the block down to the request: by
  // should_split's rules (malloc), or as a pool checkpoint says.
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
  [[noreturn]] void raise_oom(const Request& r, size_t orig_size, const ContextPtr& ctx);
  // free path
  // Caches a block whose stream events are done (kFreeCompleted); called
  // from device_allocator_streams.cc. Precondition: prepare_free_block(block)
  // since the last insert into its pool; then it never throws.
  void free_block(Block* block, const ContextPtr& ctx);
  // What caching `block` needs from the heap (index nodes of its pool),
  // taken before anything about it changes. Throws std::bad_alloc.
  void prepare_free_block(Block* block) { block->pool->reserve_for_insert(); }
  // What alloc_found_block needs from the heap for a block of `pool` that
  // no index holds (a fresh segment's, one grown in an expandable segment,
  // one taken from a use_on_oom pool): a spare Block for the remainder and
  // index nodes to insert it, taken before the block leaves the cache or
  // the device is asked. Throws std::bad_alloc, nothing changed. Nothing
  // may insert into `pool` or take a spare between this and that
  // alloc_found_block.
  void prepare_unindexed_block(BlockPool& pool) {
    recycler_.reserve_one();
    pool.reserve_for_insert();
  }
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

  // giving memory back (cache_release.cc)
  void garbage_collect_cached_blocks(const ContextPtr& ctx);
  bool release_available_cached_blocks(const Request& r, const ContextPtr& ctx);
  bool release_cached_blocks(const ContextPtr& ctx, PoolId pool = {}, bool for_user = false);
  void release_blocks(BlockPool& pool, const ContextPtr& ctx, bool policy_may_keep = false);
  void release_block(Block* block, const ContextPtr& ctx);

  // expandable segments (the part expandable_, expandable_blocks.h)
  // The engine's side of a change of mapped pages: counts them in the
  // reserved bytes and tells the observers (native: map_block and
  // unmap_block's stats updates and trace entries).
  void account_pages(const ExpandableBlocks::PageChange& change);
  // ExpandableBlocks::MayMap: the policy's before_map (true without one).
  bool policy_may_map(ExpandableSegment& seg, uintptr_t start, size_t bytes,
                      const ContextPtr& ctx);

  // cross-stream events (device_allocator_streams.cc, on events_)
  // free() of a block with stream uses (out of line: rare). While a route
  // is open the block waits, its stream uses kept and no event recorded
  // (querying or recording an event while a CUDA graph captures is an
  // error), until the first process_events or synchronize after the routes
  // have ended.
  void free_used_elsewhere(Block* block, const ContextPtr& ctx);
  // StreamEvents::free_safe_in_capture. Precondition: a route is open.
  void free_safe_in_capture(StreamId stream, const ContextPtr& ctx);
  // StreamEvents::insert_deferred. Precondition: no route is open.
  void insert_deferred_events(const ContextPtr& ctx);
  void process_events(const ContextPtr& ctx);
  // `only`: wait for the events of that private pool's blocks only.
  void synchronize_and_free_events(const ContextPtr& ctx, const PrivatePool* only = nullptr);

  // The fast-path flags (malloc_slow_, routing_), derived from the state
  // they summarize here and nowhere else. Invariant (check_invariants):
  //   malloc_slow_ == slow_reasons()
  //   routing_     == pools_.routing()
  // Called after every step that may change the event queues, the
  // expandable segments, the setting or the routes; where such a step can
  // throw part way, through a RefreshAtExit so the flags follow on a throw
  // too. Cost: a few loads; never on the cache-hit path.
  uint8_t slow_reasons() const {
    return static_cast<uint8_t>((events_.has_work() ? kStreamWork : 0) |
                                (expandable_.on() || !expandable_.empty() ? kExpandableBlocks : 0) |
                                (policy_ ? kPolicy : 0));
  }
  void refresh_fast_path() {
    malloc_slow_ = slow_reasons();
    routing_ = pools_.routing();
  }
  // Refreshes the fast-path flags when it goes out of scope, thrown
  // through or not.
  class RefreshAtExit {
   public:
    explicit RefreshAtExit(DeviceCachingAllocator& engine) : engine_(engine) {}
    ~RefreshAtExit() { engine_.refresh_fast_path(); }
    RefreshAtExit(const RefreshAtExit&) = delete;
    RefreshAtExit& operator=(const RefreshAtExit&) = delete;

   private:
    DeviceCachingAllocator& engine_;
  };

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
    if (!routing_) [[likely]] return pool_for(rounded);
    return routed_pool(rounded, stream);
  }
  BlockPool& routed_pool(size_t rounded, StreamId stream);
  // Where the segments of `pool` come from: its private pool's source, or
  // the device's backend.
  SegmentSource& segment_source(const BlockPool& pool) {
    const PrivatePool* owner = pool.owner();
    return owner && owner->segment_source ? *owner->segment_source : backend_;
  }
  // pools_.named, refusing a pool at use count 0 (pool_checkpoints.cc).
  PrivatePool& live_pool(PoolId id, const char* what) const;
  // The heads of the pool's segments, in address order.
  std::vector<const Block*> pool_segment_heads(const PrivatePool& pool) const;
  // Throws, naming the problem, unless the pool (whose segment heads are
  // `heads`) can take `checkpoint`'s layout.
  void check_restorable(const PrivatePool& pool, const std::vector<const Block*>& heads,
                        const PoolCheckpoint& checkpoint) const;
  bool gc_active() const {
    return limit_.is_set() && config_.garbage_collection_threshold > 0.0;
  }
  // An observer that runs out of host memory (a history ring growing)
  // drops that event, and the others still see it: the engine is mid-way
  // through an operation here and must finish it, so the exception stops
  // at this loop (counted in observer_failures()).
  void emit(EngineEvent& e) {
    e.device = device_;
    for (EngineObserver* o : observers_) {
      try {
        o->on_event(e);
      } catch (const std::bad_alloc&) {
        ++observer_failures_;
      }
    }
  }

  static constexpr size_t kSmallSizeForPool = 1048576;

  const int device_;
  AllocatorConfig config_;
  // has_power2_divisions(config_), decided when the config is set: without
  // divisions (the default) malloc rounds with round_to_min_blocks.
  bool power2_divisions_;
  DeviceBackend& backend_;
  std::vector<EngineObserver*> observers_;
  // Events an observer dropped for want of host memory (emit).
  uint64_t observer_failures_ = 0;
  // After-free steps of the policy that failed (policy_failures()).
  uint64_t policy_failures_ = 0;

  BlockPool large_blocks_{false};  // free blocks of large segments
  BlockPool small_blocks_{true};   // free blocks of small segments
  // The first block of every segment. A segment's head Block object lives
  // as long as the segment: splits keep the front in the original object,
  // and a freed block merges into its free lower neighbour, never the other
  // way round. Changes only when segments are reserved or released.
  SegmentHeads segment_heads_;
  size_t allocated_bytes_ = 0;  // sum of allocated blocks' sizes
  // Cross-stream events and the frees deferred while a route is open
  // (stream_events.h).
  StreamEvents events_{device_, backend_};
  // Why malloc leaves the hot path, one byte test there: kStreamWork while
  // events_.has_work(), kExpandableBlocks while expandable segments exist
  // or the setting is on. Derived by refresh_fast_path() only.
  static constexpr uint8_t kStreamWork = 1;
  static constexpr uint8_t kExpandableBlocks = 2;
  // A placement policy is set (policy_): its hooks decide, out of line.
  // Constant after construction.
  static constexpr uint8_t kPolicy = 4;
  uint8_t malloc_slow_ = 0;
  // The placement policy; null: native (policy/placement_policy.h).
  std::unique_ptr<PlacementPolicy> policy_;

  // Private pools, their routes and use_on_oom list (private_pools.h).
  PrivatePools pools_{device_};
  // pools_.routing(), for malloc's hot path: a byte test instead of
  // comparing two pointers. Derived by refresh_fast_path() only.
  bool routing_ = false;

  size_t reserved_bytes_ = 0;  // bytes held from the device
  MemoryLimit limit_;
  // Block objects for splits to take and merges and releases to give back.
  BlockRecycler recycler_;
  // The expandable segments, their blocks and the setting (declared after
  // the recycler and the segment heads it shares).
  ExpandableBlocks expandable_{device_, backend_, recycler_, segment_heads_};
};

}  // namespace cachealloc

#include "allocator/engine/device_allocator_hot.h"
