// What a request that cannot be served reports (DeviceCachingAllocator):
// native's "oom" event, then OutOfMemoryError with the numbers its message
// needs. Only on the failure path.
#pragma once

#include <cstddef>

#include "allocator/call_context.h"
#include "allocator/device_backend.h"
#include "allocator/engine_observer.h"
#include "allocator/errors.h"
#include "allocator/memory_limit.h"

namespace cachealloc {

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
  EngineEvent e{EngineEventKind::kOom};
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
