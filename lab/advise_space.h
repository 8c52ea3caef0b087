// The configs the advisor tries: native 2.11's options that steer device
// memory, in two rounds so that a 1 M-event trace is searched in well
// under a minute.
//
// Round one varies one option at a time from native's defaults:
//   expandable_segments:True;
//   max_split_size_mb 64, 128, 256, 512, 1024;
//   roundup_power2_divisions 1, 2, 4, 8, 16 (one count for every size) and
//     two per-interval lists (coarse for small sizes and fine for large,
//     and the reverse);
//   large_segment_size_mb 12, 16, 32, 64 (the segment of a 1-10 MiB
//     request and the large expandable page: smaller wastes less per
//     segment, larger packs more mid-size blocks; at most 64 so that every
//     max_split_size_mb above stays valid beside it);
//   garbage_collection_threshold 0.6, 0.8, 0.95, only under a memory limit
//     (native collects only under a memory fraction).
// Round two combines the best value of each option that beat the defaults
// (every subset of two or more), tries expandable segments with each of
// them, and max_non_split_rounding_mb 64 and 256 with the best
// max_split_size_mb, whether or not it beat the defaults alone (without a
// split limit no block is oversize and that key does nothing).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cachealloc {

enum class AdviseAxis { kExpandable, kSplit, kRoundup, kLargeSegment, kGc };

struct AxisValue {
  AdviseAxis axis;
  std::string entry;  // one PYTORCH_CUDA_ALLOC_CONF entry, "max_split_size_mb:128"
};

// Round one: one entry each.
std::vector<AxisValue> first_round(bool with_gc);

// Round two from each option's best entry that beat the defaults
// (`winners`, at most one per axis) and the best max_split_size_mb entry
// (`best_split`, "" for none). Config texts, possibly naming the same
// config twice (the caller dedupes by conf_line).
std::vector<std::string> second_round(const std::map<AdviseAxis, std::string>& winners,
                                      const std::string& best_split);

}  // namespace cachealloc
