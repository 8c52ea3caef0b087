// What the engine tells observers (stats counters, history, profilers).
//
// The engine emits one EngineEvent at each moment native PyTorch updates a
// statistic or records a trace entry, in the same order, carrying every
// number those updates need. Observers only watch: they cannot change what
// the engine does, and they are called with the engine's lock held, so they
// must be quick and must not call back into the allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/base/call_context.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/event_kind.h"

namespace cachealloc {

enum class PoolKind : uint8_t { kLarge = 0, kSmall = 1 };

// Change in the count and bytes of free blocks that are split pieces of a
// segment ("inactive split"). Applied as native does: a positive field
// increases the stat, a negative one decreases it, zero leaves it alone.
struct InactiveSplitChange {
  int64_t blocks = 0;
  int64_t bytes = 0;
};

struct EngineEvent {
  explicit EngineEvent(EventKind k) : kind(k) {}
  EventKind kind;
  int device = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  // Block or segment address; for kOom the device's free bytes (as native's
  // trace stores it).
  uintptr_t address = 0;
  // Segment bytes (segment events), block bytes (alloc/free events), the
  // rounded request (kOom).
  size_t size = 0;
  // Bytes the caller asked for (alloc/free events).
  size_t requested = 0;
  // size >= max_split_size (alloc/free/segment events).
  bool oversize = false;
  // kAlloc, kFreeCompleted, kFree: change in inactive split blocks.
  InactiveSplitChange split;
  // Segment events: the private pool holding the segment ({0, 0}: the
  // default pools), as native's TraceEntry::mempool_. NCCL's allocator hook
  // registers the new segments of a registered MemPool by it.
  uint64_t private_pool_first = 0;
  uint64_t private_pool_second = 0;
  // Caller's context, when the bindings captured one; may be null.
  const ContextPtr* context = nullptr;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_event(const EngineEvent& event) = 0;
};

}  // namespace cachealloc
