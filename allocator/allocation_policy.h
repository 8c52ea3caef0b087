// The interface every allocation policy implements: the native engine
// (DeviceCachingAllocator) and the lab's policy:expandable
// (lab/expandable_allocator.h). What-if replays (lab/whatif.cc) drive
// either through it.
//
// A concept, not a virtual base class: the native engine's malloc and free
// are forced inline into the front (device_allocator_hot.h), and a virtual
// call would put an indirect call and a lost inlining on every request.
// The events both emit are built in one place (engine_events.h).
#pragma once

#include <concepts>
#include <cstddef>
#include <vector>

#include "allocator/block.h"
#include "allocator/call_context.h"
#include "allocator/config.h"
#include "allocator/device_allocator.h"
#include "allocator/device_backend.h"
#include "allocator/engine_observer.h"

namespace cachealloc {

// One device's allocator. malloc hands out a block of at least `bytes` for
// `stream` or throws (OutOfMemoryError after emitting kOom); free takes a
// block from malloc back; record_stream delays a block's reuse until
// `stream`'s queued work is done; empty_cache returns unused cached memory
// to the device. Each change is reported to the observers as EngineEvents,
// in native's order. reserved_bytes: held from the device now.
template <class P>
concept AllocationPolicy = requires(P& p, const P& cp, size_t bytes, StreamId stream,
                                    Block* block, const ContextPtr& context,
                                    EngineObserver* observer) {
  { p.malloc(bytes, stream, context) } -> std::same_as<Block*>;
  { p.malloc(bytes, stream) } -> std::same_as<Block*>;
  p.free(block, context);
  p.free(block);
  p.record_stream(block, stream);
  p.empty_cache(context);
  p.empty_cache();
  p.add_observer(observer);
  p.set_memory_limit(bytes);
  { cp.reserved_bytes() } -> std::same_as<size_t>;
  { cp.config() } -> std::same_as<const AllocatorConfig&>;
  { cp.segments() } -> std::same_as<std::vector<SegmentView>>;
  cp.check_invariants();  // throws InvariantViolation naming the first broken rule
};

static_assert(AllocationPolicy<DeviceCachingAllocator>);

}  // namespace cachealloc
