#include "lab/conf_line.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The shortest text that reads back as exactly `v` (std::to_chars): "0.6",
// and 0.1234567 stays 0.1234567, where "%g" wrote 0.123457, another
// threshold, and two configs that differ only there got one line.
std::string number(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

// [MiB:n,...,>:n], written so that native's list rule (interval i starts
// at 2^i MiB; the first entry also fills every interval below it, '>'
// fills every interval after the last one named, an interval not named
// stays 0) gives back exactly `t`: the first run is named by its last
// interval, the last run by '>', every interval in between by itself
// (zeros left unnamed, except the one just before the '>' run: '>' starts
// after the last interval named, so that zero must be named for the run
// to start after it).
std::string divisions_list(const std::array<size_t, AllocatorConfig::kRoundupIntervals>& t) {
  size_t first_end = 0;
  while (first_end + 1 < t.size() && t[first_end + 1] == t[0]) ++first_end;
  size_t last_start = t.size() - 1;
  while (last_start > first_end + 1 && t[last_start - 1] == t.back()) --last_start;
  std::string s = "[" + std::to_string(size_t{1} << first_end) + ":" + std::to_string(t[0]);
  const bool greater = last_start > first_end && t.back() != 0;  // a '>' run
  for (size_t i = first_end + 1; i < last_start; ++i)
    if (t[i] != 0 || (greater && i + 1 == last_start))
      s += "," + std::to_string(size_t{1} << i) + ":" + std::to_string(t[i]);
  if (greater) s += ",>:" + std::to_string(t.back());
  return s + "]";
}

}  // namespace

std::string conf_line(const AllocatorConfig& c) {
  const AllocatorConfig defaults;
  std::string s;
  auto add = [&s](const std::string& entry) { s += (s.empty() ? "" : ",") + entry; };
  if (c.expandable_segments) add("expandable_segments:True");
  if (c.large_segment_size != defaults.large_segment_size)
    add("large_segment_size_mb:" + std::to_string(c.large_segment_size / kMiB));
  if (c.max_split_size != AllocatorConfig::kUnlimitedSplit) {
    add("max_split_size_mb:" + std::to_string(c.max_split_size / kMiB));
    // Every parse starts the rounding at the large segment size.
    if (c.max_non_split_rounding_size != c.large_segment_size)
      add("max_non_split_rounding_mb:" + std::to_string(c.max_non_split_rounding_size / kMiB));
  }
  const auto& t = c.roundup_power2_divisions;
  if (t != defaults.roundup_power2_divisions) {
    bool uniform = true;
    for (size_t v : t) uniform &= v == t[0];
    add("roundup_power2_divisions:" + (uniform ? std::to_string(t[0]) : divisions_list(t)));
  }
  if (c.garbage_collection_threshold > 0.0)
    add("garbage_collection_threshold:" + number(c.garbage_collection_threshold));
  return s;
}

std::string with_memory_fraction(const std::string& line, size_t limit, size_t device_memory) {
  // The nearest 6-decimal fraction, one step lower if native's limit from
  // it (fraction x device memory, truncated) would pass `limit`: a limit
  // that came from a fraction (0.05) gets that fraction back.
  const double total = static_cast<double>(device_memory);
  double fraction = std::round(std::min(1.0, static_cast<double>(limit) / total) * 1e6) / 1e6;
  if (std::floor(fraction * total) > static_cast<double>(limit)) fraction -= 1e-6;
  char buf[48];
  std::snprintf(buf, sizeof buf, "per_process_memory_fraction:%.6f", fraction);
  return line.empty() ? buf : line + "," + buf;
}

}  // namespace cachealloc
