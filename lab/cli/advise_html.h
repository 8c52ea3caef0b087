// The pages of `cachealloc advise --html` and `cachealloc min-memory
// --html`: self-contained (inline CSS and SVG, no script), opening with the
// answer. Their size does not grow with the trace: the chart keeps a fixed
// number of buckets, the peak pictures a fixed number of segments and
// blocks, and the tables one row per config searched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lab/advise.h"
#include "lab/cli/lab_input.h"
#include "lab/min_memory.h"
#include "lab/whatif.h"

namespace cachealloc {

struct AdviseReport {
  const LabInput& input;
  std::optional<size_t> memory_limit;  // bytes
  const Advice& advice;
  // Full replays drawn on the page (series and reserved peak): the trace's
  // own config first, then the recommendation when it differs; labels
  // alongside.
  std::vector<const WhatIfResult*> details;
  std::vector<std::string> detail_labels;
};

std::string render_advise_html(const AdviseReport& report);

// The whole advise page: replays the trace's own config and the
// recommendation in full (series, reserved peak) under `memory_limit`,
// then renders. What `advise --html` spends beyond the search.
std::string build_advise_page(const LabInput& input, std::optional<size_t> memory_limit,
                              bool address_hints, SegmentPlacement placement,
                              const Advice& advice);

// min-memory's page: every config's minimum, to one scale.
std::string render_min_memory_html(const LabInput& input, const std::vector<MinMemoryResult>& results);

}  // namespace cachealloc
