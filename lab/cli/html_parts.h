// The pieces the lab's HTML pages share (lab_html.cc for compare,
// advise_html.cc for advise and min-memory): escaping, colours, the style
// sheet, the memory-over-time chart, and the picture of a config's reserved
// peak. Every size on one page is written in one unit (byte_unit.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "lab/byte_unit.h"
#include "lab/request_stream.h"
#include "lab/whatif.h"

namespace cachealloc {

std::string html_escape(const std::string& s);
std::string html_fmt(const char* format, double v);
// The colour of series i, distinguishable on white and for common
// colour-vision deficiencies.
const char* html_colour(size_t i);
// The page's <style> contents.
const char* html_style();

// One line on the chart: a replay's downsampled series and its peak.
struct ChartLine {
  std::string label;
  const WhatIfResult* result = nullptr;  // series, peak_request, peak_reserved
};

// Reserved (solid) and allocated (dashed) bytes over `requests` requests,
// one colour per line (html_colour(i)), peaks marked, `limit` drawn.
std::string memory_chart(const std::vector<ChartLine>& lines, size_t requests,
                         std::optional<size_t> limit, const ByteUnit& unit);

// The moment `r` reserved its peak (r.peak must be set): its segments with
// the most unused bytes, drawn to one scale (the largest segment full
// width), and its largest live blocks with their recorded stacks where
// `stream` has them.
std::string peak_section(const WhatIfResult& r, const std::string& label, size_t colour_index,
                         const ByteUnit& unit, const RequestStream& stream);

}  // namespace cachealloc
