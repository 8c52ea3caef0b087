// What the engine tells its observers, built in one place: events about a
// block, a segment or an expandable segment's mapped pages, and what a
// request that cannot be served reports (native's "oom" event, then
// OutOfMemoryError with the numbers its message needs; only on the failure
// path).
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/base/call_context.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/errors.h"
#include "allocator/base/hot_inline.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/observe/engine_observer.h"
#include "allocator/engine/pools/private_pool.h"

namespace cachealloc {

// The pool kind events report for memory of a small (or large) pool.
constexpr PoolKind pool_kind(bool is_small) {
  return is_small ? PoolKind::kSmall : PoolKind::kLarge;
}
inline PoolKind kind_of(const BlockPool& pool) { return pool_kind(pool.is_small()); }

// An event about `block` as it stands: pool, stream, address, size,
// requested bytes and the oversize flag (size >= max_split_size) filled
// in. A step of a cache hit.
CACHEALLOC_HOT_INLINE EngineEvent block_event(EventKind kind, const Block* block,
                                              size_t max_split_size) {
  EngineEvent e(kind);
  e.pool = kind_of(*block->pool);
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = block->requested_size;
  e.oversize = block->size >= max_split_size;
  return e;
}

// An event about `bytes` of device memory at `address` held for `stream`:
// a segment (kSegmentAlloc, kSegmentFree) or an expandable segment's pages
// (kSegmentMap, kSegmentUnmap).
inline EngineEvent segment_event(EventKind kind, const BlockPool& pool, StreamId stream,
                                 uintptr_t address, size_t bytes, size_t max_split_size,
                                 const ContextPtr* context) {
  EngineEvent e(kind);
  e.pool = kind_of(pool);
  if (const PrivatePool* owner = pool.owner()) {
    e.private_pool_first = owner->id.first;
    e.private_pool_second = owner->id.second;
  }
  e.stream = stream;
  e.address = address;
  e.size = bytes;
  e.oversize = bytes >= max_split_size;
  e.context = context;
  return e;
}

// The failed request and the allocator's state, in bytes.
struct OomFacts {
  int device = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  size_t rounded = 0;     // the request after rounding
  size_t requested = 0;   // what the caller asked for
  size_t allocation = 0;  // the segment size the device refused
  size_t reserved = 0;    // held from the device
  size_t allocated = 0;   // handed out to callers
};

// Emits the kOom event through emit(EngineEvent&) (its address is the
// device's free bytes, as native's trace stores it), then throws.
template <typename Emit>
[[noreturn]] void report_out_of_memory(const OomFacts& f, const DeviceMemoryInfo& info,
                                       const MemoryLimit& limit, const ContextPtr& ctx,
                                       Emit&& emit) {
  EngineEvent e{EventKind::kOom};
  e.pool = f.pool;
  e.stream = f.stream;
  e.address = info.free_bytes;
  e.size = f.rounded;
  e.requested = f.requested;
  e.context = &ctx;
  emit(e);

  OutOfMemoryError::Details d;
  d.device = f.device;
  d.requested_bytes = f.requested;
  d.rounded_bytes = f.rounded;
  d.allocation_bytes = f.allocation;
  d.device_total = info.total_bytes;
  d.device_free = info.free_bytes;
  d.limit_set = limit.is_set();
  d.allowed_bytes = limit.allowed_bytes();
  d.reserved_bytes = f.reserved;
  d.allocated_bytes = f.allocated;
  throw OutOfMemoryError(d);
}

}  // namespace cachealloc
