// The advisor's whole search over a 1 M-event trace built in memory
// (tests/cpp/synthetic_stream.h), on two threads (issue 24's target: under
// a minute on two cores). Printed beside a reference measured in the same
// run: one what-if replay of the same stream under native defaults, the
// unit the search repeats. A timed unit test would fail whenever the shared
// machine is busy; this prints the figure and the ratio instead.
//
//   build/benchmarks/advise_speed_bench [EVENTS]   (default 1000000)
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "lab/advise.h"
#include "lab/lab_config.h"
#include "lab/whatif.h"
#include "synthetic_stream.h"

int main(int argc, char** argv) {
  using namespace cachealloc;
  const size_t events = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const RequestStream stream = synthetic_stream(events);

  const auto t0 = std::chrono::steady_clock::now();
  const WhatIfResult one = run_whatif(stream, parse_lab_config("", stream.recorded_config), {});
  const double reference =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  AdviseOptions options;
  options.threads = 2;
  const Advice a = advise(stream, options);
  std::printf("reference: one what-if replay under defaults: %.2f s (peak reserved %zu B)\n",
              reference, static_cast<size_t>(one.peak_reserved));
  std::printf("advise search, %zu events: %zu configs, %zu replays, %.1f s on %u threads "
              "(%.1fx the reference; target < 60 s)\n",
              events, a.configs_run, a.probes, a.seconds, a.threads, a.seconds / reference);
  return a.seconds < 60.0 ? 0 : 1;
}
