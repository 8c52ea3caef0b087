// Helpers shared by the benchmark programs (benchmarks/*.cc).
#pragma once

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "benchmark/benchmark.h"

namespace cachealloc::bench {

// Pins the calling thread to one CPU so the scheduler does not migrate it
// between timed iterations: $CACHEALLOC_BENCH_CPU if set, else the CPU it is
// running on now. Every benchmark here runs on the main thread, so pinning
// the main thread pins the measurement. Returns the CPU, or -1 (and prints a
// warning) when the affinity could not be set; the benchmark still runs.
inline int pin_to_one_cpu() {
  int cpu = sched_getcpu();
  if (const char* env = std::getenv("CACHEALLOC_BENCH_CPU")) {
    // A CPU number or nothing: "abc" must not silently pin CPU 0.
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*env < '0' || *env > '9' || *end != '\0' || n > CPU_SETSIZE - 1) {
      std::fprintf(stderr, "CACHEALLOC_BENCH_CPU='%s' is not a CPU number (0 to %d)\n", env,
                   CPU_SETSIZE - 1);
      std::exit(2);
    }
    cpu = static_cast<int>(n);
  }
  if (cpu < 0) return -1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "warning: could not pin to CPU %d; running unpinned\n", cpu);
    return -1;
  }
  return cpu;
}

// A counter of CPU seconds per iteration (iterations / seconds, inverted).
// The console prints it with an SI prefix and "s", e.g. "time_per_pair=41.2ns";
// JSON output holds plain seconds (4.12e-08).
inline benchmark::Counter seconds_per_iteration() {
  return benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate |
                                     benchmark::Counter::kInvert);
}

}  // namespace cachealloc::bench

// main() for the benchmark programs: pin, then run as BENCHMARK_MAIN does.
#define CACHEALLOC_BENCHMARK_MAIN()                                       \
  int main(int argc, char** argv) {                                       \
    const int cpu = ::cachealloc::bench::pin_to_one_cpu();                \
    ::benchmark::Initialize(&argc, argv);                                 \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;   \
    ::benchmark::AddCustomContext("pinned_cpu", std::to_string(cpu));     \
    ::benchmark::RunSpecifiedBenchmarks();                                \
    ::benchmark::Shutdown();                                              \
    return 0;                                                             \
  }
