// One vocabulary for what happens to a device's memory, shared by the
// engine (EngineEvent), history (TraceEntry) and replay (RecordedEvent).
//
// The first ten kinds are native's trace actions: the first seven in the
// order of the codes the C API's snapshot visitor passes (0 to 6), and all
// ten give history's ActionMask bits, kUserDefined's the highest. A replay
// feeds the engine and compares all of them but snapshot and user_defined
// entries, which change nothing in the allocator (is_replayed_action). The
// last three pass only from the engine to its observers: never traced.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cachealloc {

enum class EventKind : uint8_t {
  kSegmentAlloc,    // a segment was reserved from the device
  kSegmentFree,     // a segment was returned to the device
  kAlloc,           // a block was handed out
  kFreeRequested,   // the caller freed a block (it may wait for stream events)
  kFreeCompleted,   // a freed block is back in the cache
  kOom,             // a request failed; the caller gets OutOfMemoryError
  kSnapshot,        // a snapshot was taken (history only)
  // Expandable segments: pages were mapped into / unmapped from a segment's
  // reserved range (address and size: the pages). Native counts them in
  // reserved bytes and num_device_alloc/free, not in segment counts.
  kSegmentMap,
  kSegmentUnmap,
  kUserDefined,     // an annotation (history only)
  // Engine only. The caller freed a block that needed no stream events, so
  // it went back to the cache at once: kFreeRequested and kFreeCompleted in
  // one event (native updates and traces both, in that order, at this
  // moment). The common free; one event instead of two keeps the hot path
  // short.
  kFree,
  kAllocRetry,      // engine only: the device was asked again after the cache was emptied
  kSyncAllStreams,  // engine only: all outstanding cross-stream events were waited on
};

// Native's trace spelling of the first ten kinds ("segment_alloc",
// "alloc", "free_requested", ..., "user_defined"); "unknown" for the
// engine-only kinds.
const char* action_name(EventKind a);
// The trace action spelled `name` (as action_name), or nullopt for
// anything else.
std::optional<EventKind> parse_action(std::string_view name);
// Whether entries of this kind are requests a replay feeds the engine (or
// the events those cause): every trace action but snapshot and user_defined.
constexpr bool is_replayed_action(EventKind a) {
  return a <= EventKind::kOom || a == EventKind::kSegmentMap || a == EventKind::kSegmentUnmap;
}

}  // namespace cachealloc
