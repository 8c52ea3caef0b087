// What an open profiler scope costs on the allocation path.
//
//   BM_PairWithOpenScopes/scopes:K  a cache-hit allocate+free pair through
//       CachingAllocator with the observers the runtime attaches while a
//       scope is open (StatsCollector, ScopeTracker) and K profiler scopes
//       open (0, 1, 8). The tracker touches only the innermost scope, so
//       K = 1 and K = 8 should cost the same. (The runtime detaches the
//       tracker when no scope is open; K = 0 keeps it attached to show its
//       cost with nothing to update.)
//   BM_PairWithoutScopeTracker  the same pair without the ScopeTracker
//       attached: the difference to scopes:0 is the tracker's cost when no
//       scope is open.
//   BM_TrackerEventsOnly/scopes:K  ScopeTracker::on_event alone for the
//       two events of a pair (kAlloc, kFree) with K scopes open:
//       the tracker's own share of the pair, below the pair's run-to-run
//       spread in the benchmarks above.
//   BM_ScopeOpenClose  opening and closing one scope under the device lock
//       (what cachealloc_scope_open + cachealloc_scope_close do, minus the C
//       API), with 8 scopes already open.
//
// One iteration is one pair; "Time" is ns per pair (64 KiB requests, small
// pool: the 2 MiB segment is split and merged back each pair). Figures and
// the command: docs/profiling.md.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/config/config.h"
#include "allocator/sim/simulated_device.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "stats/device_stats.h"
#include "stats/scope_tracker.h"

namespace cachealloc {
namespace {

constexpr size_t kDeviceBytes = 85017493504;  // an H100 80GB, as engine_bench
constexpr size_t kPairBytes = 65536;
constexpr int kDevice = 0;

// One device behind the thread-safe front with the runtime's observers.
// Observers are declared before the allocator so they outlive it.
struct RuntimeLikeDevice {
  explicit RuntimeLikeDevice(bool with_tracker) {
    allocator.with_device(kDevice, [&](DeviceCachingAllocator& e) {
      e.add_observer(&stats);
      if (with_tracker) e.add_observer(&scopes);
    });
  }
  uint64_t open() {
    return allocator.with_device(kDevice, [&](DeviceCachingAllocator&) { return scopes.open(); });
  }
  void close(uint64_t id) {
    allocator.with_device(kDevice, [&](DeviceCachingAllocator&) { scopes.close(id); });
  }

  SimulatedDevice device{kDeviceBytes};
  StatsCollector stats{AllocatorConfig{}.max_split_size_stat()};
  ScopeTracker scopes;
  CachingAllocator allocator{AllocatorConfig{}, {&device}};
};

void run_pairs(benchmark::State& state, RuntimeLikeDevice& d) {
  d.allocator.deallocate(d.allocator.allocate(kPairBytes, kDevice, 0), kDevice);  // warm
  for (auto _ : state) {
    const uintptr_t p = d.allocator.allocate(kPairBytes, kDevice, 0);
    benchmark::DoNotOptimize(p);
    d.allocator.deallocate(p, kDevice);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["time_per_pair"] = bench::seconds_per_iteration();
}

void BM_PairWithOpenScopes(benchmark::State& state) {
  RuntimeLikeDevice d(/*with_tracker=*/true);
  std::vector<uint64_t> open;
  for (int64_t i = 0; i < state.range(0); ++i) open.push_back(d.open());
  run_pairs(state, d);
  for (auto it = open.rbegin(); it != open.rend(); ++it) d.close(*it);
}
BENCHMARK(BM_PairWithOpenScopes)->ArgName("scopes")->Arg(0)->Arg(1)->Arg(8);

void BM_PairWithoutScopeTracker(benchmark::State& state) {
  RuntimeLikeDevice d(/*with_tracker=*/false);
  run_pairs(state, d);
}
BENCHMARK(BM_PairWithoutScopeTracker);

void BM_TrackerEventsOnly(benchmark::State& state) {
  ScopeTracker tracker;
  for (int64_t i = 0; i < state.range(0); ++i) tracker.open();
  EngineEvent alloc(EventKind::kAlloc), free(EventKind::kFree);
  alloc.size = free.size = kPairBytes;
  for (auto _ : state) {
    tracker.on_event(alloc);
    tracker.on_event(free);
    benchmark::ClobberMemory();  // the tracker's counters are really written each pair
  }
  state.counters["time_per_pair"] = bench::seconds_per_iteration();
}
BENCHMARK(BM_TrackerEventsOnly)->ArgName("scopes")->Arg(0)->Arg(1)->Arg(8);

void BM_ScopeOpenClose(benchmark::State& state) {
  RuntimeLikeDevice d(/*with_tracker=*/true);
  std::vector<uint64_t> open;
  for (int i = 0; i < 8; ++i) open.push_back(d.open());
  for (auto _ : state) d.close(d.open());
  for (auto it = open.rbegin(); it != open.rend(); ++it) d.close(*it);
  state.counters["time_per_open_close"] = bench::seconds_per_iteration();
}
BENCHMARK(BM_ScopeOpenClose);

}  // namespace
}  // namespace cachealloc

CACHEALLOC_BENCHMARK_MAIN();
