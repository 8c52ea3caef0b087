// Cross-stream safety of DeviceCachingAllocator: its StreamEvents
// (stream_events.h) driven with this allocator's free_block and routes,
// and that part's invariant check.
#include "allocator/engine/stream_events.h"

#include "allocator/engine/device_allocator.h"
#include "allocator/base/errors.h"

namespace cachealloc {

void StreamEvents::check(absl::flat_hash_set<const Block*>& waiting,
                         const absl::flat_hash_set<const Block*>& busy) const {
  // Deferred frees (defer): exactly the freed blocks that hold stream uses
  // but no events, each listed once.
  for (const auto& [b, markers] : deferred_)
    if (waiting.erase(b) != 1)
      block_invariant_broken("deferred free is not a freed block without events", b);
  if (!waiting.empty())
    block_invariant_broken("freed block with stream uses has no events", *waiting.begin());
  for (const auto& [b, streams] : route_uses_)
    if (!busy.contains(b) || streams.empty())
      throw InvariantViolation("stream uses noted during a route for a block not in use");
}

std::vector<uint64_t> StreamEvents::free_markers(const Block* block) {
  std::vector<uint64_t> markers;
  // The block is already freed when this runs: a failed query (a stream
  // destroyed since its use, say) must not lose it. It waits for the
  // capture to end instead, as when a stream is not capturing.
  try {
    if (!backend_.capture_dependencies(device_, block->stream, markers)) return {};
    for (StreamId s : block->stream_uses)
      if (!backend_.capture_dependencies(device_, s, markers)) return {};
  } catch (const BackendError&) {
    return {};
  }
  // A node may be a dependency of several of the streams: keep it once.
  std::sort(markers.begin(), markers.end());
  markers.erase(std::unique(markers.begin(), markers.end()), markers.end());
  return markers;
}

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
// the routes (a capture may be underway).
// All or nothing: defer and insert change nothing when they throw, and the
// event goes out after them (observers then never see a free that did not
// happen; nothing else emits in between, so they see native's order).
void DeviceCachingAllocator::free_used_elsewhere(Block* block, const ContextPtr& ctx) {
  EngineEvent e = block_event(EventKind::kFreeRequested, block, config_.max_split_size);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  if (routing_) {
    events_.defer(block, config_.graph_capture_record_stream_reuse);
    malloc_slow_ |= kStreamWork;
  } else {
    events_.insert(block);
    events_.forget_route_uses(block);  // noted during a route that has ended
    note_stream_work();
  }
  emit(e);
}

// native: free_safe_blocks_in_capture, from malloc while a route is open
// and graph_capture_record_stream_reuse is set.
void DeviceCachingAllocator::free_safe_in_capture(StreamId stream, const ContextPtr& ctx) {
  try {
    events_.free_safe_in_capture(
        stream, [this](Block* block) { prepare_free_block(block); },
        [this, &ctx](Block* block) { free_block(block, ctx); });
  } catch (...) {
    note_stream_work();
    throw;
  }
  note_stream_work();
}

void DeviceCachingAllocator::insert_deferred_events(const ContextPtr& ctx) {
  if (!events_.has_deferred()) return;
  try {
    events_.insert_deferred([this](Block* block) { prepare_free_block(block); },
                            [this, &ctx](Block* block) { free_block(block, ctx); });
  } catch (...) {
    note_stream_work();
    throw;
  }
  note_stream_work();
}

// native: process_events. Frees blocks whose events have all completed;
// per stream, stops at the first event still pending. Called by malloc only
// while no route is open.
void DeviceCachingAllocator::process_events(const ContextPtr& ctx) {
  try {
    insert_deferred_events(ctx);
    events_.free_completed([this](Block* block) { prepare_free_block(block); },
                           [this, &ctx](Block* block) { free_block(block, ctx); });
  } catch (...) {
    note_stream_work();
    throw;
  }
  note_stream_work();
}

// native: synchronize_and_free_events (counted as a sync of all streams
// even when limited to one private pool's blocks, as native counts it).
// Native asserts that no route is open; emptyCache(pool) can reach this
// while one is (here: the deferred frees then keep waiting).
void DeviceCachingAllocator::synchronize_and_free_events(const ContextPtr& ctx,
                                                         const PrivatePool* only) {
  EngineEvent e{EventKind::kSyncAllStreams};
  emit(e);
  try {
    if (!routing_) insert_deferred_events(ctx);
    events_.synchronize_and_free([this](Block* block) { prepare_free_block(block); },
                                 [this, &ctx](Block* block) { free_block(block, ctx); }, only);
  } catch (...) {
    note_stream_work();
    throw;
  }
  note_stream_work();
}

}  // namespace cachealloc
