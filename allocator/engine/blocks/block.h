// A block: a contiguous byte range of one segment, either handed out to a
// caller or cached free.
//
// Invariants (checked by DeviceCachingAllocator::check_invariants()):
//   - The blocks of a segment tile it exactly:
//       head.prev == nullptr, b.next->address == b.address + b.size,
//       sum(b.size over the chain) == segment size.
//   - No two neighbours are both free (free neighbours are merged at once);
//     "free" means !allocated && event_count == 0 && stream_uses empty.
//   - Between engine operations: a block is in its pool's free index  <=>
//     it is free (block_pool.h says how an operation may bend this).
//   - size is a multiple of kMinBlockSize (512 bytes).
//   - All blocks of a segment share stream and pool.
//   - A free block holds no allocation context (context_when_allocated is
//     null): free() moves it out for its event, and blocks made by splits
//     and merges start without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "allocator/base/call_context.h"
#include "allocator/base/device_backend.h"

namespace cachealloc {

class BlockPool;

struct Block {
  uintptr_t address = 0;       // first byte
  size_t size = 0;             // bytes
  // Bytes the caller asked for the last time this block was handed out. Kept
  // after the block is freed, as native does (snapshots show it).
  size_t requested_size = 0;
  StreamId stream = 0;         // stream the segment was allocated for
  BlockPool* pool = nullptr;   // owning pool (small or large)
  Block* prev = nullptr;       // neighbour below, same segment
  Block* next = nullptr;       // neighbour above, same segment
  bool allocated = false;      // handed out and not yet freed by the caller
  // Part of an expandable segment's mapped range (expandable_segment.h).
  // Spare Blocks have it false (block_recycler.h's spare state); only the
  // out-of-line expandable paths (expandable_blocks.h) set it, and they
  // clear it before a Block goes back to the recycler.
  bool expandable = false;
  // Outstanding cross-stream events; the block is reusable only at 0.
  int event_count = 0;
  // Other streams the caller used the block on (record_stream); a set.
  absl::InlinedVector<StreamId, 2> stream_uses;
  // Pool's free-block search count when the block was last cached (GC age).
  int64_t gc_count_base = 0;
  ContextPtr context_when_allocated;          // this hand-out; null while free
  ContextPtr context_when_segment_allocated;  // head block: segment creation

  bool is_split() const { return prev != nullptr || next != nullptr; }
  bool is_free() const {
    return !allocated && event_count == 0 && stream_uses.empty();
  }
  // Freed by the caller but not yet reusable: waiting for stream events, or
  // for the routes to end before its events are recorded (native's
  // "active_pending_free").
  bool is_pending_free() const { return !allocated && !is_free(); }
};

// Throws InvariantViolation "invariant broken: WHAT (block at ADDRESS, SIZE
// bytes)": for the engine's invariant checks (block.cc).
[[noreturn]] void block_invariant_broken(const std::string& what, const Block* b);

}  // namespace cachealloc
