// The fragmentation lab's HTML report: one self-contained page (inline CSS
// and SVG, no script, no external URL) that opens offline in any browser.
//
//   - reserved (solid) and allocated (dashed) bytes over the trace for every
//     configuration on one chart (each series downsampled to its buckets'
//     maxima, so peaks survive), the reserved peaks marked, the limit drawn;
//   - the comparison table, its best row marked: under a memory limit the
//     fewest OOMs, then the lowest peak reserved;
//   - per configuration, the moment reserved peaked: a map of the segments
//     with the most unused bytes (allocated runs filled) and the largest
//     live blocks (segments drawn to one scale).
// Every size on the page is in one unit (byte_unit.h). Configs whose
// replays came out identical are drawn and listed once, as "A = B".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lab/cli/lab_input.h"
#include "lab/whatif.h"

namespace cachealloc {

struct LabReport {
  const LabInput& input;
  std::optional<size_t> memory_limit;  // bytes
  const std::vector<WhatIfResult>& results;
};

// The whole page. Results without a peak description (peak_blocks 0) get
// no peak section.
std::string render_lab_html(const LabReport& report);

}  // namespace cachealloc
