// Cross-stream safety: the queues of events and their steps (StreamEvents,
// stream_events.h, holds them and drives them).
//
// A block used on other streams (record_stream) is not cached when freed:
// an event is recorded on each of those streams and the block waits, not
// allocated yet not free, until every event has completed; then the
// engine's free_block caches it. Invariants:
//   - block->event_count == the number of queued (event, block) entries
//     for that block, over all streams;
//   - each stream's queue is in recording order, so the first pending
//     event of a stream ends the scan of that stream (as native).
//
// Header-only templates that take their caller's steps as lambdas, which
// the compiler inlines (no extra call per event). A malloc runs
// process_events whenever stream work is pending, so its early return
// (nothing completed) must stay cheap. `backend_of()` returns the engine's
// DeviceBackend and is called at each use on purpose: holding the backend
// in a register across free_block calls would cost process_events one more
// saved register and its two-instruction early return.
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "allocator/base/device_backend.h"
#include "allocator/engine/blocks/block.h"

namespace cachealloc {

// Outstanding cross-stream events: per stream, oldest first. Ordered by
// stream so that blocks waiting on several streams are freed in the same
// order in every run (a hash map's order changes with its per-process seed).
// Native walks a hash map here, so with record_stream on two or more streams
// the order of the resulting free_completed entries can differ from
// native's; the final state is the same. A std::map, not an absl::btree_map:
// a B-tree node shifts its values before the new one is constructed, and a
// std::deque's constructor allocates, so a std::bad_alloc there would leave
// the node broken; a std::map insert that throws has no effect. (Few
// streams: a node each costs nothing that matters.)
using StreamEventQueues = std::map<StreamId, std::deque<std::pair<EventId, Block*>>>;

// native: recordStream. Marks `block` as used on `stream` too (a set: each
// stream once). Uses on the block's own stream need no synchronization.
inline void add_stream_use(Block* block, StreamId stream) {
  if (stream == block->stream) return;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

// native: insert_events. Records one event on `device` for each stream in
// block->stream_uses (which it empties) and queues it; the block stays out
// of every pool until all of them have completed. All or nothing: if a step
// throws (std::bad_alloc queueing, a backend error recording), the events
// recorded so far are destroyed and dequeued, queues made for them dropped,
// and the block keeps its stream uses and no event.
template <typename BackendOf>
void insert_stream_events(StreamEventQueues& queues, BackendOf backend_of, int device,
                          Block* block) {
  const auto& streams = block->stream_uses;
  size_t queued = 0;
  // Drops stream s's queue if it is empty (made by this call).
  auto drop_if_empty = [&](StreamId s) {
    if (auto it = queues.find(s); it != queues.end() && it->second.empty()) queues.erase(it);
  };
  try {
    for (; queued < streams.size(); ++queued) {
      const StreamId s = streams[queued];
      auto& queue = queues[s];  // valid until the next insert into `queues`
      const EventId ev = backend_of().record_event(device, s);
      try {
        queue.emplace_back(ev, block);
      } catch (...) {
        backend_of().destroy_event(ev);
        throw;
      }
    }
  } catch (...) {
    if (queued < streams.size()) drop_if_empty(streams[queued]);
    while (queued > 0) {
      const StreamId s = streams[--queued];
      auto& queue = queues.find(s)->second;  // ours is its last entry
      backend_of().destroy_event(queue.back().first);
      queue.pop_back();
      drop_if_empty(s);
    }
    throw;
  }
  block->event_count += static_cast<int>(streams.size());
  block->stream_uses.clear();
}

// The loops below hand each block whose last event completed to the
// engine's pieces: prepare(Block*) first, while the event is still queued
// (it may throw, std::bad_alloc taking what caching the block needs: the
// loop then stops with the event and the block as they were), then, once
// the event is gone, free_block(Block*), which must not throw. So a throw
// never leaves a destroyed event queued or a block out of every queue and
// every pool.

// native: process_events. Destroys the completed events at the front of each
// stream's queue and calls free_block(Block*) on each block whose last event
// that was; never blocks. Streams left with no events are dropped.
template <typename BackendOf, typename Prepare, typename FreeBlock>
void free_blocks_of_completed_events(StreamEventQueues& queues, BackendOf backend_of,
                                     Prepare prepare, FreeBlock free_block) {
  if (queues.empty()) return;
  for (auto it = queues.begin(); it != queues.end();) {
    auto& queue = it->second;
    while (!queue.empty()) {
      auto [ev, block] = queue.front();
      if (!backend_of().event_completed(ev)) break;
      if (block->event_count == 1) prepare(block);
      backend_of().destroy_event(ev);
      queue.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
    if (queue.empty()) it = queues.erase(it);
    else ++it;
  }
}

// native: synchronize_and_free_events, after its sync-all-streams event
// (which the caller emits). Waits for every queued event of a block that
// `wanted(const Block*)` accepts, destroys it, calls free_block(Block*) on
// each block whose last event that was, and leaves the other events queued
// in their order. Streams left with no events are dropped.
template <typename BackendOf, typename Prepare, typename FreeBlock, typename Wanted>
void synchronize_and_free_events_if(StreamEventQueues& queues, BackendOf backend_of,
                                    Prepare prepare, FreeBlock free_block, Wanted wanted) {
  for (auto it = queues.begin(); it != queues.end();) {
    auto& queue = it->second;
    for (auto e = queue.begin(); e != queue.end();) {
      auto [ev, block] = *e;
      if (!wanted(block)) {
        ++e;
        continue;
      }
      backend_of().synchronize_event(ev);
      if (block->event_count == 1) prepare(block);
      backend_of().destroy_event(ev);
      e = queue.erase(e);
      if (--block->event_count == 0) free_block(block);
    }
    if (queue.empty()) it = queues.erase(it);
    else ++it;
  }
}

// synchronize_and_free_events_if for every block: leaves no event queued.
// Each event leaves its queue as it is destroyed (a throw part way leaves
// the rest queued).
template <typename BackendOf, typename Prepare, typename FreeBlock>
void synchronize_and_free_all_events(StreamEventQueues& queues, BackendOf backend_of,
                                     Prepare prepare, FreeBlock free_block) {
  for (auto it = queues.begin(); it != queues.end(); it = queues.erase(it)) {
    auto& queue = it->second;
    while (!queue.empty()) {
      auto [ev, block] = queue.front();
      backend_of().synchronize_event(ev);
      if (block->event_count == 1) prepare(block);
      backend_of().destroy_event(ev);
      queue.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
  }
}

}  // namespace cachealloc
