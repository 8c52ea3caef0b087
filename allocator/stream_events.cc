// Cross-stream safety of DeviceCachingAllocator: the steps of
// stream_event_queues.h on this allocator's queues, backend and
// free_block; and native's deferral of those steps
// while a private pool is routed to (a CUDA graph may be capturing, and a
// capturing stream may not have events recorded on it or queried).
#include <algorithm>
#include <cstddef>

#include "allocator/device_allocator.h"
#include "allocator/stream_event_queues.h"

namespace cachealloc {

// native: recordStream
void DeviceCachingAllocator::record_stream(Block* block, StreamId stream) {
  if (stream == block->stream) return;  // no synchronization needed
  add_stream_use(block, stream);
  if (routing_) [[unlikely]] {
    auto& during_route = route_stream_uses_[block];
    if (std::find(during_route.begin(), during_route.end(), stream) == during_route.end())
      during_route.push_back(stream);
  }
}

// native: free, for a block used on other streams: events now, or after
// the routes (a capture may be underway).
void DeviceCachingAllocator::free_used_elsewhere(Block* block, const ContextPtr& ctx) {
  EngineEvent e = block_event(EngineEventKind::kFreeRequested, block);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  emit(e);
  if (routing_) {
    defer_events(block);
    return;
  }
  route_stream_uses_.erase(block);  // noted during a route that has ended
  insert_events(block);
}

// native: insert_events
void DeviceCachingAllocator::insert_events(Block* block) {
  insert_stream_events(events_, [this]() -> DeviceBackend& { return backend_; }, device_, block);
  note_stream_work();
}

void DeviceCachingAllocator::defer_events(Block* block) {
  deferred_frees_.push_back(block);
  malloc_slow_ |= kStreamWork;
}

// native: insert_events_deferred_until_no_capture and remove_graph_stream_uses.
void DeviceCachingAllocator::insert_deferred_events(const ContextPtr& ctx) {
  if (deferred_frees_.empty()) return;
  // In place, dropping the blocks handled so far if a step throws (a
  // backend error recording an event): the rest keep waiting, listed.
  size_t handled = 0;
  try {
    for (; handled < deferred_frees_.size(); ++handled) {
      Block* block = deferred_frees_[handled];
      // Work recorded on a stream while it was captured ran in no stream
      // order: it is replayed later as part of the graph, whose memory is
      // the graph's pool. Native drops those uses (even a stream that had
      // been recorded before the route too).
      if (auto it = route_stream_uses_.find(block); it != route_stream_uses_.end()) {
        auto& uses = block->stream_uses;
        for (StreamId s : it->second)
          uses.erase(std::remove(uses.begin(), uses.end(), s), uses.end());
        route_stream_uses_.erase(it);
      }
      insert_events(block);
      if (block->event_count == 0) free_block(block, ctx);
    }
  } catch (...) {
    // A block whose events went in part-way waits on them now.
    if (deferred_frees_[handled]->event_count > 0) ++handled;
    deferred_frees_.erase(deferred_frees_.begin(),
                          deferred_frees_.begin() + static_cast<std::ptrdiff_t>(handled));
    note_stream_work();
    throw;
  }
  deferred_frees_.clear();
  note_stream_work();
}

// native: process_events. Frees blocks whose events have all completed;
// per stream, stops at the first event still pending. Called by malloc only
// while no route is open.
void DeviceCachingAllocator::process_events(const ContextPtr& ctx) {
  insert_deferred_events(ctx);
  free_blocks_of_completed_events(events_, [this]() -> DeviceBackend& { return backend_; },
                                  [this, &ctx](Block* block) { free_block(block, ctx); });
  note_stream_work();
}

// native: synchronize_and_free_events (counted as a sync of all streams
// even when limited to one private pool's blocks, as native counts it).
// Native asserts that no route is open; emptyCache(pool) can reach this
// while one is (here: the deferred frees then keep waiting).
void DeviceCachingAllocator::synchronize_and_free_events(const ContextPtr& ctx,
                                                         const PrivatePool* only) {
  EngineEvent e{EngineEventKind::kSyncAllStreams};
  emit(e);
  if (!routing_) insert_deferred_events(ctx);
  auto backend_of = [this]() -> DeviceBackend& { return backend_; };
  auto free = [this, &ctx](Block* block) { free_block(block, ctx); };
  if (!only) synchronize_and_free_all_events(events_, backend_of, free);
  else
    synchronize_and_free_events_if(events_, backend_of, free,
                                   [only](const Block* b) { return b->pool->owner() == only; });
  note_stream_work();
}

}  // namespace cachealloc
