// How long the advise page of a 10 M-event trace takes to build and write
// (issue 24's target: under 10 s), with its size (target: at most 5 MB).
// Not a Google Benchmark: one run, as a user's `cachealloc advise --html`
// makes one page; the trace is built in memory first (untimed).
//   build/benchmarks/advise_page_bench
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "advise_page_input.h"
#include "lab/cli/advise_html.h"
#include "lab/cli/output_file.h"

int main() {
  using namespace cachealloc;
  const LabInput in = synthetic_input();
  const Advice advice = advice_rows(in.stream);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("advise_page_bench_" + std::to_string(::getpid()) + ".html"))
                               .string();
  const auto start = std::chrono::steady_clock::now();
  write_output_file(path, build_advise_page(in, std::nullopt, true, SegmentPlacement::kFirstFit, advice), "HTML report");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto bytes = std::filesystem::file_size(path);
  std::filesystem::remove(path);
  std::printf("advise page of %zu recorded events (%zu requests, %zu rows): %ju bytes "
              "(target <= 5,000,000: %s), built and written in %.2f s (target < 10 s: %s)\n",
              in.stream.recorded_events, in.stream.requests.size(), advice.ranked.size(),
              static_cast<uintmax_t>(bytes), bytes <= 5'000'000u ? "met" : "NOT met", seconds,
              seconds < 10.0 ? "met" : "NOT met");
  return 0;
}
