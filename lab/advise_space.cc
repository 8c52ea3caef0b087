#include "lab/advise_space.h"

namespace cachealloc {

std::vector<AxisValue> first_round(bool with_gc) {
  std::vector<AxisValue> out;
  out.push_back({AdviseAxis::kExpandable, "expandable_segments:True"});
  for (int mib : {64, 128, 256, 512, 1024})
    out.push_back({AdviseAxis::kSplit, "max_split_size_mb:" + std::to_string(mib)});
  for (int n : {1, 2, 4, 8, 16})
    out.push_back({AdviseAxis::kRoundup, "roundup_power2_divisions:" + std::to_string(n)});
  // Native's documented example (fine rounding for large sizes), and its
  // mirror (fine for small sizes, whole powers of two from 1 GiB).
  out.push_back({AdviseAxis::kRoundup, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"});
  out.push_back({AdviseAxis::kRoundup, "roundup_power2_divisions:[256:8,512:4,1024:2,>:1]"});
  for (int mib : {12, 16, 32, 64})
    out.push_back({AdviseAxis::kLargeSegment, "large_segment_size_mb:" + std::to_string(mib)});
  if (with_gc)
    for (const char* t : {"0.6", "0.8", "0.95"})
      out.push_back({AdviseAxis::kGc, std::string("garbage_collection_threshold:") + t});
  return out;
}

std::vector<std::string> second_round(const std::map<AdviseAxis, std::string>& winners,
                                      const std::string& best_split) {
  std::vector<std::string> out;
  std::vector<std::string> entries;
  for (const auto& [axis, entry] : winners) entries.push_back(entry);
  const size_t n = entries.size();
  for (size_t mask = 1; mask < (size_t{1} << n); ++mask) {
    if ((mask & (mask - 1)) == 0) continue;  // single entries ran in round one
    std::string text;
    for (size_t i = 0; i < n; ++i)
      if (mask & (size_t{1} << i)) text += (text.empty() ? "" : ",") + entries[i];
    out.push_back(text);
  }
  if (!winners.contains(AdviseAxis::kExpandable))
    for (const std::string& entry : entries) out.push_back("expandable_segments:True," + entry);
  for (int mib : {64, 256}) {
    const std::string rounding = ",max_non_split_rounding_mb:" + std::to_string(mib);
    if (!best_split.empty()) out.push_back(best_split + rounding);
    // With every winner, when they include a split limit.
    if (n > 1 && winners.contains(AdviseAxis::kSplit)) {
      std::string all;
      for (const std::string& entry : entries) all += (all.empty() ? "" : ",") + entry;
      out.push_back(all + rounding);
    }
  }
  return out;
}

}  // namespace cachealloc
