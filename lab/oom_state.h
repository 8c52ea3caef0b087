// The moment of an out-of-memory error, read from a snapshot (native's
// schema: torch.cuda.memory._snapshot(), or the one cachealloc writes at an
// OOM): the failed request, what the device's segments held, and which
// allocation sites keep split segments from being released.
//
// Works on any snapshot: one cachealloc wrote at the OOM carries the
// failure's facts under "cachealloc_oom"; for one native dumped (an OOM
// observer calling _snapshot) the facts come from the last "oom" trace
// entry; a snapshot without either is read as its final state. Its trace
// entries are the history, or the recorder's request ring where the
// snapshot's "cachealloc_request_ring" says so
// (bindings/python/cachealloc/oom_recorder.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lab/request_stream.h"
#include "pickle/py_value.h"

namespace cachealloc {

// The failed request. Sizes in bytes; 0 = not known.
struct OomRequest {
  bool recorded = false;      // an OOM is in the snapshot (facts or trace entry)
  int device = 0;
  size_t requested = 0;       // what the program asked for (cachealloc's facts only)
  size_t rounded = 0;         // after the allocator's rounding
  size_t allocation = 0;      // the segment the device refused
  size_t device_total = 0;
  size_t device_free = 0;     // free on the device at the failure
  std::optional<size_t> allowed;  // the memory limit, when known
  bool allowed_inferred = false;  // allowed = reserved + device_free (no limit recorded)
  std::string message;        // the error message, when cachealloc wrote the snapshot
};

// One allocation site and the free bytes it pins: the free blocks of the
// split segments its live blocks are in (a segment counts once per site).
struct PinningSite {
  std::string where;      // "file:line (function)"
  size_t free_bytes = 0;  // free bytes in those segments
  size_t segments = 0;
  size_t live_bytes = 0;  // bytes of the site's live blocks in them
};

struct OomState {
  OomRequest request;
  size_t segments = 0;
  size_t reserved = 0;          // bytes of the device's segments
  size_t allocated = 0;         // bytes of active blocks (allocated or pending free)
  size_t free_blocks = 0;       // inactive blocks
  size_t largest_free = 0;      // bytes of the largest inactive block
  size_t pinned_segments = 0;   // segments with a live block: none can be released
  size_t split_segments = 0;    // pinned segments that also hold free blocks
  size_t split_free_bytes = 0;  // free bytes in the split segments
  size_t split_free_blocks = 0;
  bool frames_recorded = false;         // some live block of a split segment has frames
  std::vector<PinningSite> sites;       // most free bytes first
  // Blocks live before the device's oldest trace entry (history cut by its
  // ring, or recorded from mid-run), in address order.
  std::vector<InitialBlock> live_at_start;
  size_t live_at_start_bytes = 0;
  size_t history_entries = 0;   // the device's trace entries
  // The device's trace entries are the OOM recorder's request ring (its
  // "cachealloc_request_ring" key says "ring"), not the history;
  // ring_wrapped: the ring had overwritten its oldest records; ring_bytes:
  // its size, per device.
  bool trace_from_ring = false;
  bool ring_wrapped = false;
  size_t ring_bytes = 0;
  // Entries recorded after the OOM's: the snapshot was taken that much
  // later, so its segments are not the state at the failure.
  size_t entries_after_oom = 0;
};

// Reads the OOM moment of `snapshot`. `device`: which device (default: the
// one of the recorded OOM, else the device with the most segments).
// `memory_limit` overrides a recorded or inferred limit. Throws
// PyValueError / TraceFormatError for a malformed snapshot.
OomState read_oom_state(const PyValue& snapshot, std::optional<int> device,
                        std::optional<size_t> memory_limit);

}  // namespace cachealloc
