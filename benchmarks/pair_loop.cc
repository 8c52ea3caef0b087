// A fixed number of cache-hit allocate+free pairs, for counting instructions
// per pair with callgrind (benchmarks/count_instructions.sh). Instruction
// counts do not depend on machine load, unlike the timings of engine_bench,
// so they show what a change to the hot path costs or saves.
//
//   pair_loop PAIRS BYTES PATH
//     PATH  front          CachingAllocator, no observers
//           front+stats    ... with a StatsCollector (what the plugin keeps on)
//           front+history  ... and a HistoryRecorder recording (100k ring)
//           front+oom-ring ... front+stats and the OOM recorder's request
//                          ring (stats/request_ring.h, 4 MiB) instead
//           capi           the C entry points PyTorch calls (cachealloc_malloc
//                          / cachealloc_free) on the simulated backend
//           capi+oom-ring  the same with the request ring on
//                          (cachealloc_record_requests, 4 MiB)
//     With PyTorch's profiler recording memory, what the glue asks of the
//     C API per pair (benchmarks/count_profiler_path.sh):
//           capi+profiler-3calls  as the glue did before the runtime reported:
//                          try_malloc, then block_info and usage (two more
//                          device-lock acquisitions); block_info, free, usage
//           capi+profiler-report  cachealloc_try_malloc_report +
//                          cachealloc_free_report (one call, one lock each)
//           capi+reporter-idle  the plain capi pair after one reported pair
//                          attached the reporters (their cost when idle)
//           glue           the glue's pair with the profiler off: the _report
//                          calls with report NULL, never profiled
//           glue+after-profiling  the same after one reported pair and
//                          the 4,096 unreported frees that detach the
//                          reporters (run in warm-up): equals glue
//           glue+oom-ring  glue with the request ring on (4 MiB)
//
// One warm-up pair reserves the segment; every counted pair is a cache hit.
// With history or the request ring on, warm-up first fills the ring, so the
// counted pairs see the steady state (a full ring overwriting its oldest
// entries) and not the ring's growth, which happens once per recording.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "allocator/front/caching_allocator.h"
#include "allocator/sim/simulated_device.h"
#include "bindings/c_api/cachealloc.h"
#include "stats/device_stats.h"
#include "stats/history.h"
#include "stats/request_ring.h"

namespace cachealloc {
namespace {

// The OOM recorder's ring as the Python recorder sets it (oom_recorder.RING_MB).
constexpr size_t kOomRingBytes = size_t{4} << 20;
constexpr size_t kOomRingRecords = kOomRingBytes / RequestRing::kRecordBytes;

// Pairs that fill a ring of `records` records: a pair writes two (alloc;
// free_requested + free_completed in one).
long pairs_to_fill(size_t records) { return static_cast<long>(records / 2 + 1); }

int front_loop(long pairs, size_t bytes, bool stats, bool history_on, bool oom_ring = false) {
  SimulatedDevice device(85017493504);  // an H100 80GB
  CachingAllocator allocator(AllocatorConfig{}, {&device});
  StatsCollector collector(AllocatorConfig{}.max_split_size_stat());
  HistoryRecorder history;
  constexpr size_t kHistoryEntries = 100000;
  if (history_on) history.enable(kHistoryEntries, true);
  RequestRing ring(kOomRingRecords);
  allocator.with_device(0, [&](DeviceCachingAllocator& e) {
    if (stats) e.add_observer(&collector);
    if (history_on) e.add_observer(&history);
    if (oom_ring) e.add_observer(&ring);
  });
  const long warm_up = history_on ? pairs_to_fill(kHistoryEntries)
                       : oom_ring ? pairs_to_fill(kOomRingRecords)
                                  : 1;
  for (long i = 0; i < warm_up + pairs; ++i)
    allocator.deallocate(allocator.allocate(bytes, 0, 0), 0);
  allocator.with_device(0, [&](DeviceCachingAllocator& e) {
    e.remove_observer(&collector);
    e.remove_observer(&history);
    e.remove_observer(&ring);
  });
  return 0;
}

// Turns the request ring on (5 MiB) and fills it with `bytes` pairs through
// the C API, so that the counted pairs see a full ring.
int oom_ring_on(size_t bytes) {
  if (cachealloc_record_requests(kOomRingBytes) != 0) {
    std::fprintf(stderr, "cachealloc_record_requests: %s\n", cachealloc_last_error());
    return 1;
  }
  const auto size = static_cast<ssize_t>(bytes);
  for (long i = 0; i < pairs_to_fill(kOomRingRecords); ++i)
    cachealloc_free(cachealloc_malloc(size, 0, nullptr), size, 0, nullptr);
  return 0;
}

int capi_loop(long pairs, size_t bytes, bool oom_ring = false) {
  if (cachealloc_init("", "simulated") != 0) {
    std::fprintf(stderr, "cachealloc_init: %s\n", cachealloc_last_error());
    return 1;
  }
  if (oom_ring && oom_ring_on(bytes) != 0) return 1;
  const auto size = static_cast<ssize_t>(bytes);
  for (long i = 0; i <= pairs; ++i)
    cachealloc_free(cachealloc_malloc(size, 0, nullptr), size, 0, nullptr);
  return 0;
}

// The pairs with profiler numbers (see the top of the file); `mode`:
// 0 three calls each way, 1 the _report calls, 2 plain after one report,
// 3 the _report calls with NULL reports (after one report when `profiled`).
int capi_profiler_loop(long pairs, size_t bytes, int mode, bool profiled = false,
                       bool oom_ring = false) {
  if (cachealloc_init("", "simulated") != 0) {
    std::fprintf(stderr, "cachealloc_init: %s\n", cachealloc_last_error());
    return 1;
  }
  if (oom_ring && oom_ring_on(bytes) != 0) return 1;
  const auto size = static_cast<ssize_t>(bytes);
  int64_t sink = 0;  // keeps the reported numbers live
  cachealloc_block_report report{};
  if (mode == 3) {
    // Warm-up: one reported pair (when profiled), then past the detach.
    void* p = nullptr;
    if (profiled) {
      cachealloc_try_malloc_report(size, 0, nullptr, &p, &report);
      cachealloc_free_report(p, -1, &report);
    }
    for (long i = 0; i <= 4096; ++i) {
      cachealloc_try_malloc_report(size, 0, nullptr, &p, nullptr);
      cachealloc_free_report(p, -1, nullptr);
    }
    for (long i = 0; i < pairs; ++i) {
      cachealloc_try_malloc_report(size, 0, nullptr, &p, nullptr);
      cachealloc_free_report(p, -1, nullptr);
    }
    return 0;
  }
  for (long i = 0; i <= pairs; ++i) {
    void* p = nullptr;
    if (mode == 0) {
      size_t block = 0;
      int device = 0;
      int64_t allocated = 0, reserved = 0;
      cachealloc_try_malloc(size, 0, nullptr, &p);
      cachealloc_block_info(p, &block, &device);
      cachealloc_usage(device, &allocated, &reserved);
      sink += static_cast<int64_t>(block) + allocated + reserved;
      cachealloc_block_info(p, &block, &device);
      cachealloc_free(p, size, -1, nullptr);
      cachealloc_usage(device, &allocated, &reserved);
      sink += static_cast<int64_t>(block) + allocated + reserved;
    } else if (mode == 1 || i == 0) {
      cachealloc_try_malloc_report(size, 0, nullptr, &p, &report);
      sink += static_cast<int64_t>(report.size) + report.allocated + report.reserved;
      cachealloc_free_report(p, -1, &report);
      sink += static_cast<int64_t>(report.size) + report.allocated + report.reserved;
    } else {
      cachealloc_free(cachealloc_malloc(size, 0, nullptr), size, 0, nullptr);
    }
  }
  return sink == 42 ? 3 : 0;  // never 42: the sizes are multiples of 512
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: pair_loop PAIRS BYTES front|front+stats|front+history|"
                 "front+oom-ring|capi|capi+oom-ring|capi+profiler-3calls|capi+profiler-report|"
                 "capi+reporter-idle|glue|glue+after-profiling|glue+oom-ring\n");
    return 2;
  }
  const long pairs = std::atol(argv[1]);
  const auto bytes = static_cast<size_t>(std::atol(argv[2]));
  const std::string path = argv[3];
  if (pairs < 0 || bytes == 0) {
    std::fprintf(stderr, "pair_loop: PAIRS must be >= 0 and BYTES > 0\n");
    return 2;
  }
  if (path == "front") return cachealloc::front_loop(pairs, bytes, false, false);
  if (path == "front+stats") return cachealloc::front_loop(pairs, bytes, true, false);
  if (path == "front+history") return cachealloc::front_loop(pairs, bytes, true, true);
  if (path == "front+oom-ring") return cachealloc::front_loop(pairs, bytes, true, false, true);
  if (path == "capi") return cachealloc::capi_loop(pairs, bytes);
  if (path == "capi+oom-ring") return cachealloc::capi_loop(pairs, bytes, true);
  if (path == "glue+oom-ring") return cachealloc::capi_profiler_loop(pairs, bytes, 3, false, true);
  if (path == "capi+profiler-3calls") return cachealloc::capi_profiler_loop(pairs, bytes, 0);
  if (path == "capi+profiler-report") return cachealloc::capi_profiler_loop(pairs, bytes, 1);
  if (path == "capi+reporter-idle") return cachealloc::capi_profiler_loop(pairs, bytes, 2);
  if (path == "glue") return cachealloc::capi_profiler_loop(pairs, bytes, 3);
  if (path == "glue+after-profiling") return cachealloc::capi_profiler_loop(pairs, bytes, 3, true);
  std::fprintf(stderr, "pair_loop: unknown path '%s'\n", path.c_str());
  return 2;
}
