// The smallest memory limit under which a trace's requests run without a
// single OOM, per configuration: exact, not sampled.
//
// "Runs under L" means: no request OOMs, and reserved memory never exceeds
// L bytes. The second half matters for native with expandable segments:
// it checks the limit against a request's whole-segment size, then maps
// pages of large_segment_size, so under L it can hold more than L (a
// 64 MiB page past an 860 MiB limit). Such a run does not fit in L bytes
// of memory, and counting it as fitting would compare native's limit
// setting with another allocator's memory held. Allocators that keep
// reserved at or under their limit (classic native, every policy that
// checks the limit before it maps) are judged by OOMs alone, as before.
//
// Reserved memory only grows in whole 2 MiB units (every segment size and
// every page is a multiple), so a limit of L bytes behaves as
// floor(L / 2 MiB) units, except for garbage collection, whose threshold is
// a fraction of the exact limit. The search therefore bisects in 2 MiB
// units between 0 (fails when anything is allocated) and the peak of an
// unlimited run (succeeds: the limit never bites), then checks that
// limit - 1 byte fails; if it does not (a GC threshold effect), it bisects
// the bytes of that last unit. The answer is exact under the premise that
// a run that fits in L fits in any larger limit; it is always verified at
// L (fits) and L - 1 (an OOM, or more than L - 1 reserved).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

#include "lab/lab_config.h"
#include "lab/request_stream.h"
#include "lab/whatif_device.h"

namespace cachealloc {

struct MinMemoryOptions {
  size_t device_memory = WhatIfDevice::kDefaultCapacity;  // simulated bytes
  bool address_hints = true;  // see WhatIfOptions
  SegmentPlacement placement = SegmentPlacement::kFirstFit;  // see WhatIfOptions
  // Called after each probe with (limit bytes, whether it ran without OOM).
  std::function<void(size_t, bool)> progress;
  // Every probe stops there (WhatIfOptions::deadline; throws WhatIfTimeout).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct MinMemoryResult {
  LabConfig config;
  size_t min_limit = 0;                // bytes: smallest limit it runs under (above)
  size_t peak_reserved_unlimited = 0;  // bytes, with no limit at all
  size_t probes = 0;                   // what-if replays run (unlimited one included)
  // Of the unlimited run: segments reserved / released (mappings and
  // unmappings under expandable segments).
  size_t device_allocs_unlimited = 0, device_frees_unlimited = 0;
  // The 2 MiB-unit answer minus one byte ran clean (a GC threshold effect),
  // so the last unit was bisected byte by byte.
  bool byte_refined = false;
  double seconds = 0;                  // wall time of all probes
};

// Throws std::runtime_error if the requests OOM even without a limit (a
// request larger than the simulated device), ConfigError for a bad config.
MinMemoryResult find_min_memory(const RequestStream& stream, const LabConfig& config,
                                const MinMemoryOptions& options = {});

}  // namespace cachealloc
