// The advise page of a 10 M-event trace stays at most 5 MB (issue 24): the
// trace's own config and the recommendation replayed in full, the page
// rendered and written to a file. The trace is built here, in memory
// (advise_page_input.h): nothing big is committed. Its time (target < 10 s)
// is a benchmark's figure, not asserted here: benchmarks/advise_page_bench.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "advise_page_input.h"
#include "lab/cli/advise_html.h"
#include "lab/cli/output_file.h"

namespace cachealloc {
namespace {

TEST(AdvisePageScale, TenMillionEventPageIsAtMostFiveMegabytes) {
  const LabInput in = synthetic_input();
  ASSERT_GE(in.stream.recorded_events, kAdvisePageEvents - 2);
  const Advice advice = advice_rows(in.stream);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("advise_page_scale_" + std::to_string(::getpid()) + ".html"))
                               .string();
  write_output_file(path, build_advise_page(in, std::nullopt, true, SegmentPlacement::kFirstFit, advice), "HTML report");
  const auto bytes = std::filesystem::file_size(path);
  std::filesystem::remove(path);
  std::printf("10M-event advise page: %ju bytes (%zu requests, %zu rows)\n",
              static_cast<uintmax_t>(bytes), in.stream.requests.size(), advice.ranked.size());
  EXPECT_LE(bytes, 5'000'000u);
  EXPECT_GT(bytes, 10'000u);  // a real page: chart, table, peaks
}

}  // namespace
}  // namespace cachealloc
