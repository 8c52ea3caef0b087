// Cross-stream events of one DeviceCachingAllocator: the per-stream event
// queues (stream_event_queues.h), and native's deferral while a private
// pool is routed to (a CUDA graph may be capturing, and a capturing stream
// may not have events recorded on it or queried): the blocks freed then,
// and the stream uses noted then.
//
// Invariants (check(), given the engine's segments):
//   - the event queues' invariants (stream_event_queues.h);
//   - deferred_ holds exactly the freed blocks that hold stream uses but no
//     events, each once, in free order; a block's free markers, when it has
//     any, are graph nodes (graph_capture_record_stream_reuse);
//   - route_uses_ has entries only for blocks in use (allocated, or freed
//     and waiting), each with at least one stream.
// The engine keeps one byte of this state inline for malloc's hot path:
// its malloc_slow_ flag's kStreamWork bit, equal to has_work().
//
// The engine's free_block (which caches a block whose events are done and
// emits its kFreeCompleted) is passed in as `free_block(Block*)`, with the
// step that makes it unable to throw as `prepare(Block*)`, called before
// anything about the block changes (stream_event_queues.h): header
// templates, so the compiler inlines them as before.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "allocator/engine/block.h"
#include "allocator/engine/block_pool.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/strong_hash.h"
#include "allocator/engine/private_pool.h"
#include "allocator/engine/stream_event_queues.h"

namespace cachealloc {

class StreamEvents {
 public:
  // `backend` must outlive this.
  StreamEvents(int device, DeviceBackend& backend) : device_(device), backend_(backend) {}
  StreamEvents(const StreamEvents&) = delete;
  StreamEvents& operator=(const StreamEvents&) = delete;

  // Whether any event is queued or any free deferred.
  bool has_work() const { return !queues_.empty() || !deferred_.empty(); }
  bool has_deferred() const { return !deferred_.empty(); }

  // record_stream while a route is open: `stream`'s use of `block` was
  // captured into a graph, not queued (dropped when the block's events go
  // in after the routes). Throws std::bad_alloc, nothing changed.
  void note_use_during_route(const Block* block, StreamId stream) {
    auto [it, added] = route_uses_.try_emplace(block);
    auto& during_route = it->second;
    if (std::find(during_route.begin(), during_route.end(), stream) != during_route.end())
      return;
    try {
      during_route.push_back(stream);
    } catch (...) {
      if (added) route_uses_.erase(it);  // no entry without a stream
      throw;
    }
  }
  // Undoes note_use_during_route(block, stream) when it added `stream`
  // (the caller's next step failed).
  void forget_use_during_route(const Block* block, StreamId stream) {
    auto it = route_uses_.find(block);
    if (it == route_uses_.end()) return;
    auto& uses = it->second;
    uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
    if (uses.empty()) route_uses_.erase(it);
  }
  bool route_use_noted(const Block* block, StreamId stream) const {
    auto it = route_uses_.find(block);
    return it != route_uses_.end() &&
           std::find(it->second.begin(), it->second.end(), stream) != it->second.end();
  }
  // A block freed after the routes ended: the uses noted during them no
  // longer matter.
  void forget_route_uses(const Block* block) { route_uses_.erase(block); }
  // native: insert_events. An event on each stream in block->stream_uses.
  void insert(Block* block) {
    insert_stream_events(queues_, [this]() -> DeviceBackend& { return backend_; }, device_, block);
  }
  // native: free's capture branch. `block` (freed, stream uses kept, no
  // event recorded) waits until insert_deferred, or, with `markers`
  // (graph_capture_record_stream_reuse), until free_safe_in_capture finds
  // its last uses behind the capture. Throws std::bad_alloc, nothing
  // changed.
  void defer(Block* block, bool markers) {
    deferred_.push_back({block, markers ? free_markers(block) : std::vector<uint64_t>{}});
  }

  // native: free_safe_blocks_in_capture. Called by malloc on `stream` while
  // a route is open: each deferred block allocated on `stream` whose free
  // markers all precede the work `stream` captures from now on is freed
  // (free_block) without events, the graph's order standing in for them.
  // Blocks deferred without markers keep waiting for insert_deferred.
  template <typename Prepare, typename FreeBlock>
  void free_safe_in_capture(StreamId stream, Prepare prepare, FreeBlock free_block) {
    for (size_t i = 0; i < deferred_.size();) {
      auto& [block, markers] = deferred_[i];
      if (markers.empty() || block->stream != stream ||
          !backend_.capture_follows(device_, stream, markers)) {
        ++i;
        continue;
      }
      prepare(block);
      Block* freed = block;
      freed->stream_uses.clear();
      route_uses_.erase(freed);
      deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
      free_block(freed);
    }
  }

  // native: insert_events_deferred_until_no_capture and
  // remove_graph_stream_uses. Precondition: no route is open. For each
  // deferred block: drops the stream uses noted during a route, inserts
  // events for the rest, and calls free_block on it at once if none is
  // left. If a step throws (a backend error recording an event,
  // std::bad_alloc), the blocks handled so far leave the list and the rest
  // keep waiting (the one that failed with its events not recorded:
  // insert_stream_events is all or nothing).
  template <typename Prepare, typename FreeBlock>
  void insert_deferred(Prepare prepare, FreeBlock free_block) {
    size_t handled = 0;
    try {
      for (; handled < deferred_.size(); ++handled) {
        Block* block = deferred_[handled].block;
        prepare(block);  // before anything changes: it may be freed at once
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
        if (block->event_count == 0) free_block(block);
      }
    } catch (...) {
      deferred_.erase(deferred_.begin(),
                      deferred_.begin() + static_cast<std::ptrdiff_t>(handled));
      throw;
    }
    deferred_.clear();
  }
  // native: process_events' queue walk (free_blocks_of_completed_events).
  template <typename Prepare, typename FreeBlock>
  void free_completed(Prepare prepare, FreeBlock free_block) {
    free_blocks_of_completed_events(queues_, [this]() -> DeviceBackend& { return backend_; },
                                    prepare, free_block);
  }
  // native: synchronize_and_free_events' wait, for every queued event or
  // (`only`) those of that private pool's blocks.
  template <typename Prepare, typename FreeBlock>
  void synchronize_and_free(Prepare prepare, FreeBlock free_block, const PrivatePool* only) {
    auto backend_of = [this]() -> DeviceBackend& { return backend_; };
    if (!only) synchronize_and_free_all_events(queues_, backend_of, prepare, free_block);
    else
      synchronize_and_free_events_if(queues_, backend_of, prepare, free_block,
                                     [only](const Block* b) { return b->pool->owner() == only; });
  }

  // Throws InvariantViolation for the first broken rule above. `waiting`:
  // the freed blocks that hold stream uses but no events (consumed);
  // `busy`: the blocks allocated or waiting.
  void check(absl::flat_hash_set<const Block*>& waiting,
             const absl::flat_hash_set<const Block*>& busy) const;

 private:
  const int device_;
  DeviceBackend& backend_;
  // Outstanding cross-stream events, per stream, oldest first.
  StreamEventQueues queues_;
  // native: record_free_markers. The capture dependencies of the block's
  // allocation stream and of every stream that used it; none when any of
  // those streams is not capturing or the backend cannot tell (the block
  // then waits for the capture to end). Never throws BackendError.
  std::vector<uint64_t> free_markers(const Block* block);

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
