#include "lab/min_memory.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "lab/whatif.h"

namespace cachealloc {
namespace {

constexpr size_t kUnit = 2097152;  // 2 MiB: the granularity of reserved memory

}  // namespace

MinMemoryResult find_min_memory(const RequestStream& stream, const LabConfig& config,
                                const MinMemoryOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MinMemoryResult out;
  out.config = config;
  WhatIfOptions probe_options;
  probe_options.device_memory = options.device_memory;
  probe_options.address_hints = options.address_hints;
  probe_options.placement = options.placement;
  probe_options.stop_at_first_oom = true;
  probe_options.series_points = 1;
  probe_options.deadline = options.deadline;

  auto runs_clean = [&](std::optional<size_t> limit) {
    probe_options.memory_limit = limit;
    const WhatIfResult r = run_whatif(stream, config, probe_options);
    ++out.probes;
    // Fits: no OOM, and never more reserved than the limit (min_memory.h).
    const bool clean = r.ooms == 0 && (!limit || r.peak_reserved <= *limit);
    if (limit && options.progress) options.progress(*limit, clean);
    if (!limit) {
      out.peak_reserved_unlimited = r.peak_reserved;
      out.device_allocs_unlimited = r.device_allocs;
      out.device_frees_unlimited = r.device_frees;
    }
    return clean;
  };

  if (!runs_clean(std::nullopt))
    throw std::runtime_error("config '" + config.label() + "': a request fails even with no limit on a " +
                             std::to_string(options.device_memory) + "-byte simulated device");
  const size_t peak = out.peak_reserved_unlimited;
  if (peak > 0) {
    // Invariant: `low` units fail (0 does: something must be reserved),
    // `high` units succeed (at or above the unlimited peak nothing changes).
    size_t low = 0, high = (peak + kUnit - 1) / kUnit;
    while (high - low > 1) {
      const size_t mid = low + (high - low) / 2;
      (runs_clean(mid * kUnit) ? high : low) = mid;
    }
    size_t limit = high * kUnit;
    if (runs_clean(limit - 1)) {
      // Only a GC threshold can make this happen: bisect the bytes of the unit.
      out.byte_refined = true;
      size_t fail = low * kUnit, pass = limit - 1;
      while (pass - fail > 1) {
        const size_t mid = fail + (pass - fail) / 2;
        (runs_clean(mid) ? pass : fail) = mid;
      }
      limit = pass;
    }
    out.min_limit = limit;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace cachealloc
