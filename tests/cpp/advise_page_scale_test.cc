// The advise page of a 10 M-event trace stays at most 5 MB and is written
// in under 10 s (issue 24): the trace's own config and the recommendation
// replayed in full, the page rendered and written to a file. The trace is
// built here, in memory (synthetic_stream.h): nothing big is committed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "lab/advise.h"
#include "lab/advise_space.h"
#include "lab/cli/advise_html.h"
#include "lab/cli/lab_input.h"
#include "lab/cli/output_file.h"
#include "lab/lab_config.h"
#include "synthetic_stream.h"

namespace cachealloc {
namespace {

constexpr size_t kEvents = 10'000'000;

LabInput synthetic_input() {
  LabInput in;
  in.path = in.name = "synthetic_10M";
  in.stream = synthetic_stream(kEvents);
  return in;
}

// Rows as the search makes them: the baseline, and one per config of both
// rounds (every option won its axis), so the table is as long as it gets.
Advice advice_rows(const RequestStream& stream) {
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

TEST(AdvisePageScale, TenMillionEventPageIsAtMostFiveMegabytesAndWrittenInUnderTenSeconds) {
  const LabInput in = synthetic_input();
  ASSERT_GE(in.stream.recorded_events, kEvents - 2);
  const Advice advice = advice_rows(in.stream);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("advise_page_scale_" + std::to_string(::getpid()) + ".html"))
                               .string();
  const auto start = std::chrono::steady_clock::now();
  write_output_file(path, build_advise_page(in, std::nullopt, true, advice), "HTML report");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto bytes = std::filesystem::file_size(path);
  std::filesystem::remove(path);
  std::printf("10M-event advise page: %ju bytes, written in %.2f s (%zu requests, %zu rows)\n",
              static_cast<uintmax_t>(bytes), seconds, in.stream.requests.size(),
              advice.ranked.size());
  EXPECT_LE(bytes, 5'000'000u);
  EXPECT_LT(seconds, 10.0);
  EXPECT_GT(bytes, 10'000u);  // a real page: chart, table, peaks
}

}  // namespace
}  // namespace cachealloc
