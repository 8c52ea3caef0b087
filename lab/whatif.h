// What-if replay: a trace's requests (request_stream.h) run under another
// configuration, on a fresh engine and a plain simulated device.
//
// Unlike the lockstep replayer nothing is compared: under a different
// config the engine makes different decisions, and only the program's
// requests are fed in. Per request it samples reserved and allocated bytes
// (peaks, the moment reserved peaks, a downsampled time series) and counts
// device reservations/releases, retries and OOMs. A request that OOMs is
// counted and the replay goes on; later frees of it are skipped. A fallible
// request (request_stream.h, FallibleRequest) that OOMs is a fallback, not
// an OOM of the run: counted apart, and its group makes no more requests.
//
// Fast by design: one pass over a flat request array, Block* per slot in a
// vector, no allocation per request beyond the engine's own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <optional>
#include <vector>

#include "lab/lab_config.h"
#include "lab/request_stream.h"
#include "lab/whatif_device.h"
#include "pickle/py_value.h"

namespace cachealloc {

struct WhatIfOptions {
  std::optional<size_t> memory_limit;  // bytes the engine may reserve
  size_t device_memory = WhatIfDevice::kDefaultCapacity;  // simulated bytes
  // Offer the device the recorded segment address of each request (native
  // policy only; see WhatIfDevice). Off: plain first fit.
  bool address_hints = true;
  // Where a segment goes when no hint applies (WhatIfDevice).
  SegmentPlacement placement = SegmentPlacement::kFirstFit;
  size_t series_points = 1000;      // time-series buckets (max per bucket)
  bool stop_at_first_oom = false;   // for min-memory probes (fallbacks go on)
  // > 0: describe the moment reserved first peaked (largest live blocks, up
  // to this many, and every segment), by replaying again up to it.
  size_t peak_blocks = 0;
  // > 0: record history (the newest this many entries) and build a
  // snapshot pickle tree for PyTorch's memory viewer.
  size_t snapshot_entries = 0;
  bool check_invariants = false;    // engine and device, after every request (slow)
  // Called every 2^20 requests with (requests done, requests total).
  std::function<void(size_t, size_t)> progress;
  // Past this moment the replay stops and throws WhatIfTimeout (checked
  // every 4096 requests, so it overruns by at most that many requests).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// A replay ran past WhatIfOptions::deadline.
class WhatIfTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One bucket of consecutive requests: the largest values seen in it.
struct SeriesPoint {
  size_t first_request = 0;
  size_t reserved = 0;   // bytes
  size_t allocated = 0;  // bytes
};

struct LiveBlock {
  uintptr_t address = 0;
  size_t size = 0;          // block bytes (rounded)
  size_t requested = 0;     // bytes the program asked for
  StreamId stream = 0;
  size_t allocated_at = 0;  // request index
};

struct SegmentUse {
  uintptr_t address = 0;
  size_t bytes = 0;
  size_t allocated_bytes = 0;
  size_t largest_free = 0;  // largest free block, bytes
  size_t blocks = 0;
  bool is_small = false;
  // Runs of allocated blocks: (offset from the segment start, bytes).
  std::vector<std::pair<size_t, size_t>> allocated_runs;
};

struct PeakMoment {
  size_t request_index = 0;
  size_t reserved = 0, allocated = 0;  // bytes
  size_t live_blocks = 0;
  std::vector<LiveBlock> largest_blocks;  // largest first
  std::vector<SegmentUse> segments;       // address order
};

struct WhatIfResult {
  LabConfig config;
  size_t requests = 0;            // requests replayed
  size_t recorded_events = 0;     // trace entries those requests stand for
  size_t peak_reserved = 0;       // bytes
  size_t peak_allocated = 0;      // bytes
  size_t peak_request = 0;        // request at which reserved first peaked
  size_t allocated_at_peak = 0;   // bytes allocated at that moment
  double fragmentation_at_peak = 0;  // 1 - allocated_at_peak / peak_reserved
  size_t device_allocs = 0;       // segments reserved (mappings, expandable)
  size_t device_frees = 0;        // segments released (unmappings)
  size_t retries = 0;             // allocations retried after emptying the cache
  // Driver calls a CUDA device would make for expandable segments' pages
  // (page_handles.h: creates, maps, unmaps, releases, access, syncs), over
  // the whole replay and from `late_request` on: the request of the middle
  // allocation (of a training trace's steps, the second half: the steady
  // steps, once the cache is warm).
  PageCalls page_calls, page_calls_late;
  size_t late_request = 0;
  // Requests refused that the program needed: the OOMs that end a run (a
  // fallible request's refusal is a fallback, below, not counted here).
  size_t ooms = 0;
  // Fallible requests refused (each also ran the engine's OOM path, and
  // counts in its num_ooms as native's does), and fallible requests not
  // made because their group had fallen back before.
  size_t fallbacks = 0, fallback_skips = 0;
  size_t recorded_ooms_succeeded = 0;  // recorded OOMs served this time
  size_t final_reserved = 0, final_allocated = 0;  // bytes at the end
  bool stopped_at_oom = false;    // stop_at_first_oom cut the replay short
  double seconds = 0;             // wall time of the replay loop
  std::vector<SeriesPoint> series;
  std::optional<PeakMoment> peak;
  std::optional<PyValue> snapshot;
};

// Runs `stream` under `config`. Throws ConfigError (policy rejects the
// config), SizeOverflowError (a request beyond kMaxRequestSize),
// InvariantViolation (check_invariants) or WhatIfTimeout (deadline).
WhatIfResult run_whatif(const RequestStream& stream, const LabConfig& config,
                        const WhatIfOptions& options);

}  // namespace cachealloc
