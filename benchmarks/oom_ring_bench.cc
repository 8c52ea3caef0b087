// What the OOM flight recorder's request ring (cachealloc_record_requests)
// costs per cache-hit allocate+free pair, as a ratio against the ring off,
// in the same process. Not a Google Benchmark: a plain program, so that it
// runs wherever the binary is copied (the GPU host has no Google Benchmark).
//
//   oom_ring_bench [PAIRS [ROUNDS [BYTES]]]    defaults 2000000 9 4194304
//
// Each round times PAIRS pairs with the ring off, then PAIRS with it on
// (4 MiB, oom_recorder.RING_MB, full: filled before timing, so the pairs
// see the steady state of a ring overwriting its oldest records), through
// two paths on the simulated backend:
//   capi  cachealloc_malloc / cachealloc_free;
//   glue  the calls the PyTorch glue makes with the profiler off
//         (cachealloc_try_malloc_report / cachealloc_free_report, no report).
// It prints ns per pair off and on (minimum and median of the rounds), the
// ratio on/off of the minimums and the median of the per-round ratios, and
// the ns the ring adds per pair (minimums: the least disturbed rounds; on
// a loaded machine the medians spread more). Pinned
// to the CPU it starts on; instruction counts per pair (which do not
// depend on machine load) come from count_instructions.sh's
// front+oom-ring, capi+oom-ring and glue+oom-ring rows.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace {

constexpr size_t kRingBytes = size_t{4} << 20;  // oom_recorder.RING_MB
constexpr long kRingRecords = kRingBytes / 32;  // RequestRing::kRecordBytes

using Clock = std::chrono::steady_clock;

void capi_pairs(long n, ssize_t size) {
  for (long i = 0; i < n; ++i) cachealloc_free(cachealloc_malloc(size, 0, nullptr), size, 0, nullptr);
}

void glue_pairs(long n, ssize_t size) {
  for (long i = 0; i < n; ++i) {
    void* p = nullptr;
    cachealloc_try_malloc_report(size, 0, nullptr, &p, nullptr);
    cachealloc_free_report(p, -1, nullptr);
  }
}

// ns per pair of `pairs` pairs through `fn`.
double time_pairs(void (*fn)(long, ssize_t), long pairs, ssize_t size) {
  const auto t0 = Clock::now();
  fn(pairs, size);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / pairs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool ring(bool on, ssize_t size, void (*fn)(long, ssize_t)) {
  if (cachealloc_record_requests(on ? kRingBytes : 0) != 0) {
    std::fprintf(stderr, "cachealloc_record_requests: %s\n", cachealloc_last_error());
    return false;
  }
  if (on) fn(kRingRecords / 2 + 1, size);  // fill it (two records a pair): the steady state
  return true;
}

long arg(int argc, char** argv, int i, long fallback) {
  if (argc <= i) return fallback;
  char* end = nullptr;
  const long v = std::strtol(argv[i], &end, 10);
  if (*end != '\0' || v <= 0) {
    std::fprintf(stderr, "oom_ring_bench: '%s' is not a positive number\n", argv[i]);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const long pairs = arg(argc, argv, 1, 2000000);
  const long rounds = arg(argc, argv, 2, 9);
  const auto size = static_cast<ssize_t>(arg(argc, argv, 3, 4194304));
  if (const int cpu = sched_getcpu(); cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  if (cachealloc_init("", "simulated") != 0) {
    std::fprintf(stderr, "cachealloc_init: %s\n", cachealloc_last_error());
    return 1;
  }
  struct Path {
    const char* name;
    void (*fn)(long, ssize_t);
  };
  const Path paths[] = {{"capi", capi_pairs}, {"glue", glue_pairs}};
  std::printf("OOM recorder's request ring (4 MiB, full), cache-hit pairs of %zd bytes on the "
              "simulated device: %ld pairs x %ld rounds, ring off and on alternating\n",
              size, pairs, rounds);
  std::printf("%-6s %17s %17s %21s %14s\n", "path", "off ns (min/med)", "on ns (min/med)",
              "on/off (min, median)", "added ns (min)");
  for (const Path& p : paths) {
    p.fn(100000, size);  // warm-up: the segment, the caches
    std::vector<double> off, on, ratio;
    for (long r = 0; r < rounds; ++r) {
      if (!ring(false, size, p.fn)) return 1;
      off.push_back(time_pairs(p.fn, pairs, size));
      if (!ring(true, size, p.fn)) return 1;
      on.push_back(time_pairs(p.fn, pairs, size));
      ratio.push_back(on.back() / off.back());
    }
    if (!ring(false, size, p.fn)) return 1;
    const double off_min = *std::min_element(off.begin(), off.end());
    const double on_min = *std::min_element(on.begin(), on.end());
    std::printf("%-6s %8.2f /%7.2f %8.2f /%7.2f %10.4f, %8.4f %14.2f\n", p.name, off_min,
                median(off), on_min, median(on), on_min / off_min, median(ratio), on_min - off_min);
  }
  return 0;
}
