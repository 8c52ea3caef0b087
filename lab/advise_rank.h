// How the advisor orders candidate configs (issue 24):
//
//   1. by the smallest memory limit under which the run needs no OOM
//      (min_memory.h: exact), then by OOMs under the user's limit;
//   2. but among the configs within 1 % of the best minimum, the fewest
//      OOMs under the limit first, then the fewest device calls (segment
//      reservations and releases, or page mappings and unmappings): a
//      percent of memory is not worth many more cudaMalloc/cuMemMap calls.
//
// Remaining ties go to the config with fewer keys (the simpler line to
// set), then to the order given, so the ranking is deterministic.
#pragma once

#include <cstddef>
#include <vector>

namespace cachealloc {

// The part of a candidate's results the ranking reads.
struct RankKey {
  size_t min_memory = 0;    // bytes
  size_t ooms = 0;          // under the user's limit (0 without one)
  size_t device_calls = 0;  // reservations + releases
  size_t keys = 0;          // options the config sets
};

// Configs within this fraction above the best minimum form the top tier.
inline constexpr double kNearBestFraction = 0.01;

// Indices into `keys`, best first.
std::vector<size_t> rank_configs(const std::vector<RankKey>& keys);

}  // namespace cachealloc
