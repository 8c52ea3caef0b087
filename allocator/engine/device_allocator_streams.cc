// DeviceCachingAllocator's cross-stream frees: record_stream, a free of a
// block used on other streams, and the steps that poll, wait for and
// insert stream events. They drive the part events_ (StreamEvents,
// stream_events.h) with this engine's free_block and routes, and refresh
// the fast-path flags after each change of its queues.
#include "allocator/engine/device_allocator.h"

#include "allocator/engine/engine_events.h"

namespace cachealloc {

// native: recordStream
// All or nothing: the use noted during a route is undone if adding the
// stream use then fails (std::bad_alloc growing either list).
void DeviceCachingAllocator::record_stream(Block* block, StreamId stream) {
  if (stream == block->stream) return;  // no synchronization needed
  if (!routing_) [[likely]] {
    add_stream_use(block, stream);
    return;
  }
  const bool noted_before = events_.route_use_noted(block, stream);
  events_.note_use_during_route(block, stream);
  try {
    add_stream_use(block, stream);
  } catch (...) {
    if (!noted_before) events_.forget_use_during_route(block, stream);
    throw;
  }
}

// native: free, for a block used on other streams: events now, or after
// the routes (a capture may be underway). All or nothing: defer and insert
// change nothing when they throw, and the event goes out after them
// (observers then never see a free that did not happen; nothing else emits
// in between, so they see native's order).
void DeviceCachingAllocator::free_used_elsewhere(Block* block, const ContextPtr& ctx) {
  EngineEvent e = block_event(EventKind::kFreeRequested, block, config_.max_split_size);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  {
    const RefreshAtExit refresh(*this);
    if (routing_) {
      events_.defer(block, config_.graph_capture_record_stream_reuse);
    } else {
      events_.insert(block);
      events_.forget_route_uses(block);  // noted during a route that has ended
    }
  }
  emit(e);
}

// native: free_safe_blocks_in_capture, from malloc while a route is open
// and graph_capture_record_stream_reuse is set.
void DeviceCachingAllocator::free_safe_in_capture(StreamId stream, const ContextPtr& ctx) {
  const RefreshAtExit refresh(*this);
  events_.free_safe_in_capture(stream, [this](Block* block) { prepare_free_block(block); },
                         [this, &ctx](Block* block) { free_block(block, ctx); });
}

void DeviceCachingAllocator::insert_deferred_events(const ContextPtr& ctx) {
  if (!events_.has_deferred()) return;
  const RefreshAtExit refresh(*this);
  events_.insert_deferred([this](Block* block) { prepare_free_block(block); },
                         [this, &ctx](Block* block) { free_block(block, ctx); });
}

// native: process_events. Frees blocks whose events have all completed;
// per stream, stops at the first event still pending. Called by malloc only
// while no route is open.
void DeviceCachingAllocator::process_events(const ContextPtr& ctx) {
  const RefreshAtExit refresh(*this);
  insert_deferred_events(ctx);
  events_.free_completed([this](Block* block) { prepare_free_block(block); },
                         [this, &ctx](Block* block) { free_block(block, ctx); });
}

// native: synchronize_and_free_events (counted as a sync of all streams
// even when limited to one private pool's blocks, as native counts it).
// Native asserts that no route is open; emptyCache(pool) can reach this
// while one is (here: the deferred frees then keep waiting).
void DeviceCachingAllocator::synchronize_and_free_events(const ContextPtr& ctx,
                                                         const PrivatePool* only) {
  EngineEvent e{EventKind::kSyncAllStreams};
  emit(e);
  const RefreshAtExit refresh(*this);
  if (!routing_) insert_deferred_events(ctx);
  events_.synchronize_and_free([this](Block* block) { prepare_free_block(block); },
                         [this, &ctx](Block* block) { free_block(block, ctx); }, only);
}

}  // namespace cachealloc
