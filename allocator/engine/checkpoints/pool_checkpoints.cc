// PoolCheckpoints (pool_checkpoints.h): saving a pool's segment layout and
// putting it back, and checking its live allocations.
#include "allocator/engine/checkpoints/pool_checkpoints.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/engine/blocks/size_policy.h"

namespace cachealloc {

namespace {
[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("pool checkpoint: " + what);
}
}  // namespace

PrivatePool& PoolCheckpoints::live_pool(PoolId id, const char* what) const {
  PrivatePool& pool = pools_.named(id, what);
  // Native's check: a freeable pool's graphs are gone.
  if (pool.use_count == 0)
    refuse(std::string(what) + ": memory pool " + id.to_string() + " was released");
  return pool;
}

// native: getCheckpointState. Segments in address order (native: its
// active-block hash set's order, then its free index's). As native, the
// deferred events go in first even while a route is open (PyTorch
// checkpoints after a capture has ended).
PoolCheckpoint PoolCheckpoints::checkpoint(PoolId id, const ContextPtr& ctx) {
  const PrivatePool& pool = live_pool(id, "checkpoint_pool");
  events_.insert_deferred(ctx);
  PoolCheckpoint cp;
  cp.device = device_;
  cp.pool = id;
  for (const Block* head : segments_.heads_of(pool)) {
    PoolCheckpoint::SegmentState s;
    s.stream = head->stream;
    s.is_small = head->pool->is_small();
    for (const Block* b = head; b; b = b->next) {
      if (b->is_pending_free())
        refuse("a block of memory pool " + id.to_string() +
               " is waiting for stream events (synchronize, or empty_cache, first)");
      s.blocks.push_back({b->address, b->size, b->allocated});
    }
    cp.segments.push_back(std::move(s));
  }
  return cp;
}

// Checks, before anything changes, that the pool can take the checkpoint's
// layout: each checkpointed segment is still one of the pool's, with the
// same bytes, tiled exactly by the checkpoint's blocks; no block of the
// pool waits for events or was used on other streams (its free would
// leave it pending, not free). Throws std::invalid_argument naming the
// problem.
void PoolCheckpoints::check_restorable(const PrivatePool& pool,
                                       const std::vector<const Block*>& pool_heads,
                                       const PoolCheckpoint& cp) const {
  StrongHashMap<uintptr_t, const Block*> heads;     // by address
  StrongHashMap<uintptr_t, size_t> segment_bytes;  // head address -> bytes
  for (const Block* head : pool_heads) {
    heads[head->address] = head;
    size_t bytes = 0;
    for (const Block* b = head; b; b = b->next) {
      if (b->is_pending_free())
        refuse("a block of memory pool " + pool.id.to_string() + " is waiting for stream events");
      if (b->allocated && !b->stream_uses.empty())
        refuse("a block of memory pool " + pool.id.to_string() +
               " was used on other streams (record_stream)");
      bytes += b->size;
    }
    segment_bytes[head->address] = bytes;
  }
  for (const auto& s : cp.segments) {
    if (s.blocks.empty()) refuse("a checkpointed segment has no blocks");
    const uintptr_t head = s.blocks.front().address;
    auto it = segment_bytes.find(head);
    if (it == segment_bytes.end())
      refuse("memory pool " + pool.id.to_string() + " has no segment at " +
             std::to_string(head) + " any more");
    const Block* h = heads.at(head);
    if (s.stream != h->stream || s.is_small != h->pool->is_small())
      refuse("the segment at " + std::to_string(head) + " has another stream or pool kind");
    size_t offset = 0;
    bool previous_free = false;
    for (const auto& b : s.blocks) {
      if (b.size == 0 || b.size % kMinBlockSize != 0 || b.address != head + offset ||
          b.size > it->second - offset)
        refuse("the checkpoint's blocks do not tile the segment at " + std::to_string(head));
      // Two free neighbours would merge: not a layout the engine can hold.
      if (previous_free && !b.allocated)
        refuse("the checkpoint has two free neighbours at " + std::to_string(b.address));
      previous_free = !b.allocated;
      offset += b.size;
    }
    if (offset != it->second)
      refuse("the checkpoint's blocks do not tile the segment at " + std::to_string(head));
    segment_bytes.erase(it);  // each segment once
  }
}

// native: setCheckpointPoolState (freeBlocksAllocatedToPool, then
// setSegmentStateToCheckpoint per segment).
PoolRestore PoolCheckpoints::restore(const PoolCheckpoint& cp, Free free, Carve carve) {
  if (cp.device != device_)
    refuse("checkpoint of device " + std::to_string(cp.device) + " given to device " +
           std::to_string(device_));
  PrivatePool& pool = live_pool(cp.pool, "restore_pool");
  // Segment heads keep their Block objects through frees and merges, so
  // one list serves the check and both steps.
  const std::vector<const Block*> heads = segments_.heads_of(pool);
  check_restorable(pool, heads, cp);
  PoolRestore rr;

  // 1. Free every block allocated in the pool. Frees merge only free
  // neighbours, so the allocated blocks listed first all stay valid.
  std::vector<Block*> allocated;
  for (const Block* head : heads)
    for (Block* b = const_cast<Block*>(head); b; b = b->next)
      if (b->allocated) allocated.push_back(b);
  for (Block* b : allocated) {
    rr.freed.push_back(b->address);
    free(b);
  }

  // 2. Each checkpointed segment is now one free block: carve the
  // checkpoint's blocks out of it, front to back, splitting wherever the
  // block is larger than the checkpoint's (max_split_size may have changed
  // since), then free those the checkpoint had free.
  StrongHashMap<uintptr_t, Block*> free_at;
  for (const Block* head : heads) free_at[head->address] = const_cast<Block*>(head);
  for (const auto& s : cp.segments) {
    Block* curr = free_at.at(s.blocks.front().address);
    Block* head = curr;
    for (const auto& state : s.blocks) {
      curr = carve(curr, state.size, /*split=*/curr->size > state.size);
      curr = curr->next;
    }
    // Every block of the segment is allocated now: a free merges with none
    // of the blocks still to be visited.
    curr = head;
    for (const auto& state : s.blocks) {
      Block* next = curr->next;
      if (state.allocated) rr.allocated.push_back(curr);
      else free(curr);
      curr = next;
    }
  }
  return rr;
}

std::vector<uintptr_t> PoolCheckpoints::allocations(PoolId id) const {
  const PrivatePool& pool = pools_.named(id, "pool_allocations");
  std::vector<uintptr_t> out;
  for (const Block* head : segments_.heads_of(pool))
    for (const Block* b = head; b; b = b->next)
      if (b->allocated) out.push_back(b->address);
  return out;
}

// native: checkPoolLiveAllocations
bool PoolCheckpoints::allocations_are(PoolId id,
                                      const StrongHashSet<uintptr_t>& expected) const {
  const std::vector<uintptr_t> allocated = allocations(id);
  if (allocated.size() != expected.size()) return false;
  return std::all_of(allocated.begin(), allocated.end(),
                     [&](uintptr_t a) { return expected.contains(a); });
}

}  // namespace cachealloc
