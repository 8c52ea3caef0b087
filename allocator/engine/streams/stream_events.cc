// StreamEvents (stream_events.h): the engine's cross-stream frees over the
// event queues, the deferral while a route is open, the free markers of a
// capture and the part's invariant check.
#include "allocator/engine/streams/stream_events.h"

#include <algorithm>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/engine/observe/engine_events.h"

namespace cachealloc {

// All or nothing: the use noted during a route is undone if adding the
// stream use then fails (std::bad_alloc growing either list).
void StreamEvents::record_use(Block* block, StreamId stream) {
  if (stream == block->stream) return;  // no synchronization needed
  if (!fast_.routing()) [[likely]] {
    add_stream_use(block, stream);
    return;
  }
  const bool noted_before = route_use_noted(block, stream);
  note_use_during_route(block, stream);
  try {
    add_stream_use(block, stream);
  } catch (...) {
    if (!noted_before) forget_use_during_route(block, stream);
    throw;
  }
}

// Deferring and inserting change nothing when they throw, and the event
// goes out after them (observers then never see a free that did not
// happen; nothing else emits in between, so they see native's order).
void StreamEvents::free_used_elsewhere(Block* block, const ContextPtr& ctx) {
  EngineEvent e = block_event(EventKind::kFreeRequested, block, config_.max_split_size);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  {
    const auto flag = flag_at_exit();
    if (fast_.routing()) {
      // native: free's capture branch. With markers
      // (graph_capture_record_stream_reuse) free_safe_in_capture may cache
      // the block before the routes end.
      deferred_.push_back({block, config_.graph_capture_record_stream_reuse
                                      ? free_markers(block)
                                      : std::vector<uint64_t>{}});
    } else {
      insert(block);
      route_uses_.erase(block);  // noted during a route that has ended
    }
  }
  observers_.emit(e);
}

void StreamEvents::free_safe_in_capture(StreamId stream, const ContextPtr& ctx) {
  const auto flag = flag_at_exit();
  for (size_t i = 0; i < deferred_.size();) {
    auto& [block, markers] = deferred_[i];
    if (markers.empty() || block->stream != stream ||
        !backend_.capture_follows(device_, stream, markers)) {
      ++i;
      continue;
    }
    Prepare{}(block);
    Block* freed = block;
    freed->stream_uses.clear();
    route_uses_.erase(freed);
    deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
    cache_completed_(freed, ctx);
  }
}

void StreamEvents::insert_deferred(const ContextPtr& ctx) {
  if (deferred_.empty()) return;
  const auto flag = flag_at_exit();
  size_t handled = 0;
  try {
    for (; handled < deferred_.size(); ++handled) {
      Block* block = deferred_[handled].block;
      Prepare{}(block);  // before anything changes: it may be cached at once
      // Work recorded on a stream while it was captured ran in no stream
      // order: it is replayed later as part of the graph, whose memory is
      // the graph's pool. Native drops those uses (even a stream that had
      // been recorded before the route too).
      if (auto it = route_uses_.find(block); it != route_uses_.end()) {
        // On a copy, so that a failed insert leaves the block as it was.
        auto uses = block->stream_uses;
        for (StreamId s : it->second)
          uses.erase(std::remove(uses.begin(), uses.end(), s), uses.end());
        std::swap(uses, block->stream_uses);
        try {
          insert(block);
        } catch (...) {
          std::swap(uses, block->stream_uses);
          throw;
        }
        route_uses_.erase(it);
      } else {
        insert(block);
      }
      if (block->event_count == 0) cache_completed_(block, ctx);
    }
  } catch (...) {
    deferred_.erase(deferred_.begin(), deferred_.begin() + static_cast<std::ptrdiff_t>(handled));
    throw;
  }
  deferred_.clear();
}

void StreamEvents::process(const ContextPtr& ctx) {
  const auto flag = flag_at_exit();
  insert_deferred(ctx);
  free_blocks_of_completed_events(queues_, [this]() -> DeviceBackend& { return backend_; },
                                  Prepare{}, cache_with(ctx));
}

void StreamEvents::synchronize_and_free(const ContextPtr& ctx, const PrivatePool* only) {
  EngineEvent e{EventKind::kSyncAllStreams};
  observers_.emit(e);
  const auto flag = flag_at_exit();
  if (!fast_.routing()) insert_deferred(ctx);
  auto backend_of = [this]() -> DeviceBackend& { return backend_; };
  if (!only) {
    synchronize_and_free_all_events(queues_, backend_of, Prepare{}, cache_with(ctx));
  } else {
    synchronize_and_free_events_if(queues_, backend_of, Prepare{}, cache_with(ctx),
                                   [only](const Block* b) { return b->pool->owner() == only; });
  }
}

void StreamEvents::note_use_during_route(const Block* block, StreamId stream) {
  auto [it, added] = route_uses_.try_emplace(block);
  auto& during_route = it->second;
  if (std::find(during_route.begin(), during_route.end(), stream) != during_route.end()) return;
  try {
    during_route.push_back(stream);
  } catch (...) {
    if (added) route_uses_.erase(it);  // no entry without a stream
    throw;
  }
}

void StreamEvents::forget_use_during_route(const Block* block, StreamId stream) {
  auto it = route_uses_.find(block);
  if (it == route_uses_.end()) return;
  auto& uses = it->second;
  uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
  if (uses.empty()) route_uses_.erase(it);
}

bool StreamEvents::route_use_noted(const Block* block, StreamId stream) const {
  auto it = route_uses_.find(block);
  return it != route_uses_.end() &&
         std::find(it->second.begin(), it->second.end(), stream) != it->second.end();
}

void StreamEvents::check(absl::flat_hash_set<const Block*>& waiting,
                         const absl::flat_hash_set<const Block*>& busy) const {
  // Deferred frees: exactly the freed blocks that hold stream uses but no
  // events, each listed once.
  for (const auto& [b, markers] : deferred_)
    if (waiting.erase(b) != 1)
      block_invariant_broken("deferred free is not a freed block without events", b);
  if (!waiting.empty())
    block_invariant_broken("freed block with stream uses has no events", *waiting.begin());
  for (const auto& [b, streams] : route_uses_)
    if (!busy.contains(b) || streams.empty())
      throw InvariantViolation("stream uses noted during a route for a block not in use");
  if (fast_.has(FastPath::kStreamWork) != has_work())
    throw InvariantViolation("stream work flag disagrees with the event queues");
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

}  // namespace cachealloc
