// The input of the 10 M-event advise page, shared by its size test
// (tests/cpp/advise_page_scale_test.cc) and its time benchmark
// (benchmarks/advise_page_bench.cc): a synthetic trace built in memory
// (synthetic_stream.h) and advice rows as long as the search makes them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lab/advise.h"
#include "lab/advise_space.h"
#include "lab/cli/lab_input.h"
#include "lab/lab_config.h"
#include "synthetic_stream.h"

namespace cachealloc {

inline constexpr size_t kAdvisePageEvents = 10'000'000;

inline LabInput synthetic_input() {
  LabInput in;
  in.path = in.name = "synthetic_10M";
  in.stream = synthetic_stream(kAdvisePageEvents);
  return in;
}

// Rows as the search makes them: the baseline, and one per config of both
// rounds (every option won its axis), so the table is as long as it gets.
inline Advice advice_rows(const RequestStream& stream) {
  Advice a;
  std::vector<std::string> texts{"trace"};
  for (const AxisValue& v : first_round(true)) texts.push_back(v.entry);
  for (const std::string& t : second_round({{AdviseAxis::kExpandable, "expandable_segments:True"},
                                            {AdviseAxis::kSplit, "max_split_size_mb:128"},
                                            {AdviseAxis::kRoundup, "roundup_power2_divisions:4"},
                                            {AdviseAxis::kGc, "garbage_collection_threshold:0.8"}},
                                           "max_split_size_mb:128"))
    texts.push_back(t);
  for (size_t i = 0; i < texts.size(); ++i) {
    AdviseCandidate c;
    c.config = parse_lab_config(texts[i], stream.recorded_config);
    c.labels = {texts[i]};
    c.min.min_limit = (size_t{1} << 30) + i * (size_t{2} << 20);  // page layout only: not asserted
    a.ranked.push_back(std::move(c));
  }
  a.recommended = 1;  // expandable_segments:True: a config other than the trace's
  a.baseline = 0;
  a.headline = "headline";
  return a;
}

}  // namespace cachealloc
