// The advisor's whole search over a 1 M-event trace runs on the two threads
// asked for and covers its configs (issue 24). The trace is built in memory
// (synthetic_stream.h). Its time (target: under a minute on two cores) is
// a benchmark's figure, not asserted here: benchmarks/advise_speed_bench.cc.
#include <gtest/gtest.h>

#include <cstdio>

#include "lab/advise.h"
#include "synthetic_stream.h"

namespace cachealloc {
namespace {

TEST(AdviseSpeed, OneMillionEventSearchRunsOnTwoThreads) {
  const RequestStream stream = synthetic_stream(1'000'000);
  AdviseOptions options;
  options.threads = 2;
  const Advice a = advise(stream, options);
  std::printf("1M-event search: %zu configs, %zu replays, %.1f s on %u threads\n", a.configs_run,
              a.probes, a.seconds, a.threads);
  EXPECT_EQ(a.threads, 2u);
  EXPECT_GE(a.configs_run, 14u);  // defaults and round one at least
}

}  // namespace
}  // namespace cachealloc
