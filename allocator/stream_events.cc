// Cross-stream safety. A block used on other streams (record_stream) is not
// cached when freed: an event is recorded on each of those streams and the
// block waits, active but unallocated, until every event has completed.
#include <algorithm>

#include "allocator/device_allocator.h"

namespace cachealloc {

void DeviceCachingAllocator::record_stream(Block* block, StreamId stream) {
  // Uses on the allocation stream need no synchronization.
  if (stream == block->stream) return;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end())
    uses.push_back(stream);
}

// native: insert_events
void DeviceCachingAllocator::insert_events(Block* block) {
  auto streams = std::move(block->stream_uses);
  block->stream_uses.clear();
  for (StreamId s : streams) {
    const EventId ev = backend_.record_event(device_, s);
    ++block->event_count;
    events_[s].emplace_back(ev, block);
  }
}

// native: process_events. Frees blocks whose events have all completed;
// per stream, stops at the first event still pending.
void DeviceCachingAllocator::process_events(const ContextPtr& ctx) {
  if (events_.empty()) return;
  for (auto it = events_.begin(); it != events_.end();) {
    auto& queue = it->second;
    while (!queue.empty()) {
      auto [ev, block] = queue.front();
      if (!backend_.event_completed(ev)) break;
      backend_.destroy_event(ev);
      queue.pop_front();
      if (--block->event_count == 0) free_block(block, ctx);
    }
    if (queue.empty()) events_.erase(it++);
    else ++it;
  }
}

// native: synchronize_and_free_events
void DeviceCachingAllocator::synchronize_and_free_events(const ContextPtr& ctx) {
  EngineEvent e{EngineEventKind::kSyncAllStreams};
  emit(e);
  for (auto& [stream, queue] : events_) {
    for (auto [ev, block] : queue) {
      backend_.synchronize_event(ev);
      backend_.destroy_event(ev);
      if (--block->event_count == 0) free_block(block, ctx);
    }
  }
  events_.clear();
}

}  // namespace cachealloc
