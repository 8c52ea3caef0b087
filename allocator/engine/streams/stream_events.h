// Cross-stream frees of one DeviceCachingAllocator: record_stream, a free
// of a block used on other streams, and the per-stream event queues
// (stream_event_queues.h) those blocks wait in; and native's deferral while
// a private pool is routed to (a CUDA graph may be capturing, and a
// capturing stream may not have events recorded on it or queried): the
// blocks freed then, and the stream uses noted then.
//
// Invariants (check(), given the engine's segments):
//   - the event queues' invariants (stream_event_queues.h);
//   - deferred_ holds exactly the freed blocks that hold stream uses but no
//     events, each once, in free order; a block's free markers, when it has
//     any, are graph nodes (graph_capture_record_stream_reuse);
//   - route_uses_ has entries only for blocks in use (allocated, or freed
//     and waiting), each with at least one stream;
//   - fast path: has(kStreamWork) == has_work() (fast_path.h), kept after
//     every change of the queues, thrown through or not.
//
// A block whose events have all completed goes back to the engine through
// `cache_completed` (its free_block: merged, cached, kFreeCompleted
// emitted), after this part made that step unable to throw (index nodes
// of the block's pool, taken before anything about the block changes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/strong_hash.h"
#include "allocator/config/config.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/blocks/fast_path.h"
#include "allocator/engine/observe/engine_observers.h"
#include "allocator/engine/pools/private_pool.h"
#include "allocator/engine/streams/stream_event_queues.h"

namespace cachealloc {

class StreamEvents {
 public:
  // The engine's free_block: caches `block` (whose events are done) and
  // emits kFreeCompleted. Called after block->pool->reserve_for_insert(),
  // so it never throws.
  using CacheCompleted = std::function<void(Block* block, const ContextPtr& ctx)>;

  // `backend`, `config` (the engine's config in force), `observers` and
  // `fast` must outlive this part.
  StreamEvents(int device, DeviceBackend& backend, const AllocatorConfig& config,
               EngineObservers& observers, FastPath& fast, CacheCompleted cache_completed)
      : device_(device),
        backend_(backend),
        config_(config),
        observers_(observers),
        fast_(fast),
        cache_completed_(std::move(cache_completed)) {}
  StreamEvents(const StreamEvents&) = delete;
  StreamEvents& operator=(const StreamEvents&) = delete;

  // Whether any event is queued or any free deferred.
  bool has_work() const { return !queues_.empty() || !deferred_.empty(); }

  // native: recordStream. Marks `block` as used on `stream` too: its memory
  // is not reused before the work queued on `stream` at free() time has
  // finished. While a route is open the use is also noted as made during
  // the route. All or nothing: throws std::bad_alloc, nothing changed.
  void record_use(Block* block, StreamId stream);
  // native: free, for a block with stream uses, already marked not
  // allocated: events now, or after the routes (a capture may be underway:
  // the block waits, its stream uses kept and no event recorded, until the
  // first process or synchronize_and_free after the routes have ended).
  // Emits kFreeRequested. All or nothing: throws BackendError (recording an
  // event) or std::bad_alloc with nothing changed and nothing emitted.
  void free_used_elsewhere(Block* block, const ContextPtr& ctx);
  // native: free_safe_blocks_in_capture. Called by malloc on `stream` while
  // a route is open (and graph_capture_record_stream_reuse is set): each
  // deferred block allocated on `stream` whose free markers all precede the
  // work `stream` captures from now on is cached without events, the
  // graph's order standing in for them. Blocks deferred without markers
  // keep waiting.
  void free_safe_in_capture(StreamId stream, const ContextPtr& ctx);
  // native: insert_events_deferred_until_no_capture and
  // remove_graph_stream_uses. Precondition: no route is open. For each
  // deferred block: drops the stream uses noted during a route, inserts
  // events for the rest, and caches it at once if none is left. If a step
  // throws (a backend error recording an event, std::bad_alloc), the
  // blocks handled so far leave the list and the rest keep waiting (the one
  // that failed with its events not recorded).
  void insert_deferred(const ContextPtr& ctx);
  // native: process_events. Caches the blocks whose events have all
  // completed; per stream, stops at the first event still pending. Called
  // by malloc only while no route is open.
  void process(const ContextPtr& ctx);
  // native: synchronize_and_free_events: emits kSyncAllStreams (counted as
  // a sync of all streams even when limited to one private pool's blocks,
  // as native counts it), inserts the deferred events unless a route is
  // open (native asserts none is; emptyCache(pool) can reach this while
  // one is, and the deferred frees then keep waiting), waits for every
  // queued event or (`only`) those of that private pool's blocks, and
  // caches their blocks.
  void synchronize_and_free(const ContextPtr& ctx, const PrivatePool* only = nullptr);

  // Throws InvariantViolation for the first broken rule above. `waiting`:
  // the freed blocks that hold stream uses but no events (consumed);
  // `busy`: the blocks allocated or waiting.
  void check(absl::flat_hash_set<const Block*>& waiting,
             const absl::flat_hash_set<const Block*>& busy) const;

 private:
  // record_stream while a route is open: `stream`'s use of `block` was
  // captured into a graph, not queued (dropped when the block's events go
  // in after the routes). Throws std::bad_alloc, nothing changed.
  void note_use_during_route(const Block* block, StreamId stream);
  // Undoes note_use_during_route(block, stream) when it added `stream`
  // (the caller's next step failed).
  void forget_use_during_route(const Block* block, StreamId stream);
  bool route_use_noted(const Block* block, StreamId stream) const;
  // native: insert_events. An event on each stream in block->stream_uses.
  void insert(Block* block) {
    insert_stream_events(queues_, [this]() -> DeviceBackend& { return backend_; }, device_, block);
  }
  // native: record_free_markers. The capture dependencies of the block's
  // allocation stream and of every stream that used it; none when any of
  // those streams is not capturing or the backend cannot tell (the block
  // then waits for the capture to end). Never throws BackendError.
  std::vector<uint64_t> free_markers(const Block* block);
  // The queue walks' two steps: make caching `block` unable to throw
  // (before anything about it changes), then cache it.
  struct Prepare {
    void operator()(Block* block) const { block->pool->reserve_for_insert(); }
  };
  auto cache_with(const ContextPtr& ctx) {
    return [this, &ctx](Block* block) { cache_completed_(block, ctx); };
  }
  // Keeps the fast path's kStreamWork at exit (the queues change).
  auto flag_at_exit() {
    return FastPath::KeepAtExit(fast_, FastPath::kStreamWork, [this] { return has_work(); });
  }

  const int device_;
  DeviceBackend& backend_;
  const AllocatorConfig& config_;
  EngineObservers& observers_;
  FastPath& fast_;
  const CacheCompleted cache_completed_;
  // Outstanding cross-stream events, per stream, oldest first.
  StreamEventQueues queues_;

  // A freed block whose events wait for the routes to end (defer): it is
  // !allocated, event_count == 0, stream_uses not empty.
  struct Deferred {
    Block* block;
    std::vector<uint64_t> markers;  // graph nodes; empty: wait for the routes
  };
  // In free order (native keeps a hash map keyed by the Block, whose order
  // varies: the order of the blocks' kFreeCompleted events differs).
  std::vector<Deferred> deferred_;
  // native: block_to_graph_stream_uses. Per block, the streams that
  // record_stream added while a route was open. An entry lives until its
  // block is freed (insert_deferred reads it; native keeps the entries of
  // blocks freed after the routes ended, keyed by a Block object that may
  // be reused later; here they are dropped at the free).
  // (A StrongHashMap: it grows while a free may run out of host memory.)
  StrongHashMap<const Block*, absl::InlinedVector<StreamId, 2>> route_uses_;
};

}  // namespace cachealloc
