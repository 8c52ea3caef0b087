// Cross-stream safety of DeviceCachingAllocator: the steps shared with the
// lab's expandable policy (stream_event_queues.h), on this allocator's
// queues, backend and free_block.
#include "allocator/device_allocator.h"
#include "allocator/stream_event_queues.h"

namespace cachealloc {

void DeviceCachingAllocator::record_stream(Block* block, StreamId stream) {
  add_stream_use(block, stream);
}

// native: insert_events
void DeviceCachingAllocator::insert_events(Block* block) {
  insert_stream_events(events_, [this]() -> DeviceBackend& { return backend_; }, device_, block);
}

// native: process_events. Frees blocks whose events have all completed;
// per stream, stops at the first event still pending.
void DeviceCachingAllocator::process_events(const ContextPtr& ctx) {
  free_blocks_of_completed_events(events_, [this]() -> DeviceBackend& { return backend_; },
                                  [this, &ctx](Block* block) { free_block(block, ctx); });
}

// native: synchronize_and_free_events (counted as a sync of all streams
// even when limited to one private pool's blocks, as native counts it).
void DeviceCachingAllocator::synchronize_and_free_events(const ContextPtr& ctx,
                                                         const PrivatePool* only) {
  EngineEvent e{EngineEventKind::kSyncAllStreams};
  emit(e);
  auto backend_of = [this]() -> DeviceBackend& { return backend_; };
  auto free = [this, &ctx](Block* block) { free_block(block, ctx); };
  if (!only) {
    synchronize_and_free_all_events(events_, backend_of, free);
    return;
  }
  synchronize_and_free_events_if(events_, backend_of, free,
                                 [only](const Block* b) { return b->pool->owner() == only; });
}

}  // namespace cachealloc
