// The allocator's hot path: an allocate + free pair that the cache serves
// without touching the device.
//
//   BM_FrontPair     through CachingAllocator (device lock + pointer table),
//                    the path the PyTorch plugin calls, per request size and
//                    per set of observers attached;
//   BM_EnginePair    the same pair on the bare DeviceCachingAllocator (no
//                    lock, no pointer table): the difference is the front's cost;
//   BM_LockAndPointerTable  only what the front adds (two uncontended
//                    DeviceMutex lock/unlock, one PointerTable insert and
//                    erase), to attribute that difference;
//   BM_FrontMixed / BM_EngineMixed  a 64-live-block workload: each pair frees
//                    a random live block and allocates a random size from
//                    kMixedSizes in its place (native: 1,115 ns per pair).
//
// One iteration is one pair, so "Time" is ns per pair; the time_per_pair
// counter says the same in CPU time ("123.4ns"), items_per_second is pairs
// per second and segment_allocs_per_pair counts device calls in the timed
// loop (0 for a true cache hit). Each run starts a fresh allocator on a SimulatedDevice and
// warms it before timing. Figures and how to rerun: docs/benchmarks.md.
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/front/device_mutex.h"
#include "allocator/front/pointer_table.h"
#include "allocator/sim/simulated_device.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "stats/device_stats.h"
#include "stats/history.h"

namespace cachealloc {
namespace {

constexpr size_t kDeviceBytes = 85017493504;  // an H100 80GB, as replay uses
constexpr StreamId kStream = 0;
constexpr int kDevice = 0;
// Ring size for "history on": large enough that its memory matters, as a
// user recording a training step would set it.
constexpr size_t kHistoryEntries = 100000;

// Note on DoNotOptimize: only its const overload is used here. With GCC 12 and Debian's Google Benchmark 1.7.1, the
// non-const overload (asm "+m,r") applied to live[slot] in the mixed loop
// below made the store of the new handle vanish: the next free() then hit an
// address already freed (InvalidPointerError). The allocate/free calls are
// out-of-line library calls, so nothing here can be optimised away anyway.

// A SimulatedDevice that counts segment reservations, to prove the timed
// pairs are cache hits without attaching an observer.
class CountingDevice : public SimulatedDevice {
 public:
  CountingDevice() : SimulatedDevice(kDeviceBytes) {}
  uintptr_t allocate(int device, size_t bytes, StreamId stream) override {
    ++allocations;
    return SimulatedDevice::allocate(device, bytes, stream);
  }
  int64_t allocations = 0;
};

// Which observers are attached to the engine while timing.
enum class Observers {
  kNone,             // engine alone
  kStats,            // StatsCollector (memory_stats), what the plugin keeps on
  kStatsHistoryOff,  // + HistoryRecorder attached but disabled (the default)
  kStatsHistoryOn,   // + HistoryRecorder recording into a kHistoryEntries ring
};

// The observers of one engine; declared before the engine so they outlive it.
class ObserverSet {
 public:
  explicit ObserverSet(Observers which)
      : which_(which), stats_(AllocatorConfig{}.max_split_size_stat()) {
    if (which_ == Observers::kStatsHistoryOn) history_.enable(kHistoryEntries, true);
  }
  // Pairs to run before timing: 1 (reserves the segment), or enough to fill
  // the history ring (a pair writes one or two records, at most three
  // entries).
  size_t warm_up_pairs() const {
    return which_ == Observers::kStatsHistoryOn ? kHistoryEntries : 1;
  }
  void attach(DeviceCachingAllocator& engine) {
    if (which_ == Observers::kNone) return;
    engine.add_observer(&stats_);
    if (which_ != Observers::kStats) engine.add_observer(&history_);
  }

 private:
  const Observers which_;
  StatsCollector stats_;
  HistoryRecorder history_;
};

// One device behind the thread-safe front, as the plugin builds it.
struct Front {
  explicit Front(Observers which) : observers(which) {
    allocator.with_device(kDevice, [&](DeviceCachingAllocator& e) { observers.attach(e); });
  }
  uintptr_t allocate(size_t bytes) { return allocator.allocate(bytes, kDevice, kStream); }
  void free(uintptr_t address) { allocator.deallocate(address, kDevice); }

  CountingDevice device;
  ObserverSet observers;
  CachingAllocator allocator{AllocatorConfig{}, {&device}};
};

// The bare engine: no lock, no address -> block table.
struct Engine {
  explicit Engine(Observers which) : observers(which) { observers.attach(engine); }
  Block* allocate(size_t bytes) { return engine.malloc(bytes, kStream); }
  void free(Block* block) { engine.free(block); }

  CountingDevice device;
  ObserverSet observers;
  DeviceCachingAllocator engine{kDevice, AllocatorConfig{}, device};
};

void report_pairs(benchmark::State& state, int64_t device_allocations_while_timed) {
  state.SetItemsProcessed(state.iterations());
  state.counters["time_per_pair"] = bench::seconds_per_iteration();
  state.counters["segment_allocs_per_pair"] = benchmark::Counter(
      static_cast<double>(device_allocations_while_timed), benchmark::Counter::kAvgIterations);
}

// ---- one size, allocate then free: a cache hit every time -----------------

template <typename Setup>
void run_hit_pairs(benchmark::State& state, Setup& s) {
  const auto bytes = static_cast<size_t>(state.range(0));
  // Warm: the first pair reserves the segment; every later pair is a hit.
  // With history on, warm-up also fills the ring, so the timed pairs see
  // the steady state (overwriting the oldest records), not its growth.
  for (size_t i = 0; i < s.observers.warm_up_pairs(); ++i) s.free(s.allocate(bytes));
  const int64_t before = s.device.allocations;
  for (auto _ : state) {
    const auto p = s.allocate(bytes);
    benchmark::DoNotOptimize(p);  // const overload: see the note above
    s.free(p);
  }
  report_pairs(state, s.device.allocations - before);
}

void BM_FrontPair(benchmark::State& state, Observers which) {
  Front s(which);
  run_hit_pairs(state, s);
}

void BM_EnginePair(benchmark::State& state, Observers which) {
  Engine s(which);
  run_hit_pairs(state, s);
}

// 512 B and 64 KiB: small pool (2 MiB segment, split and re-merged each pair);
// 4 MiB: large pool (20 MiB segment, split); 64 MiB: large pool, whole segment.
void HitSizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes");
  for (int64_t bytes : {int64_t{512}, int64_t{65536}, int64_t{4} << 20, int64_t{64} << 20})
    b->Arg(bytes);
}

BENCHMARK_CAPTURE(BM_FrontPair, no_observers, Observers::kNone)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_FrontPair, stats, Observers::kStats)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_FrontPair, stats_history_off, Observers::kStatsHistoryOff)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_FrontPair, stats_history_on, Observers::kStatsHistoryOn)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_EnginePair, no_observers, Observers::kNone)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_EnginePair, stats, Observers::kStats)->Apply(HitSizes);
BENCHMARK_CAPTURE(BM_EnginePair, stats_history_on, Observers::kStatsHistoryOn)->Apply(HitSizes);

// ---- what the front adds, alone ------------------------------------------

// CachingAllocator::allocate + deallocate minus the engine: lock, insert,
// unlock; lock, erase, unlock; the same types as the front uses.
void BM_LockAndPointerTable(benchmark::State& state) {
  DeviceMutex mutex;
  PointerTable blocks;
  Block block;
  block.address = SimulatedDevice::kDefaultBase;
  for (auto _ : state) {
    {
      std::lock_guard<DeviceMutex> lock(mutex);
      blocks.insert(block.address, &block);
    }
    {
      std::lock_guard<DeviceMutex> lock(mutex);
      Block* const found = blocks.erase(block.address);
      benchmark::DoNotOptimize(found);
    }
  }
  report_pairs(state, 0);
}
BENCHMARK(BM_LockAndPointerTable);

// ---- 64 live blocks, random replacement ----------------------------------

constexpr size_t kLiveBlocks = 64;
// Both pools, split and unsplit large blocks.
constexpr std::array<size_t, 8> kMixedSizes = {
    512, 4096, 65536, 524288, 1048576, size_t{4} << 20, size_t{16} << 20, size_t{64} << 20};
// A fixed random schedule (slot to replace, size to put there), replayed
// cyclically so no random numbers are drawn while timing.
constexpr size_t kScheduleLength = 1 << 16;

struct MixedStep {
  uint32_t slot;
  uint32_t size_index;
};

const std::vector<MixedStep>& mixed_schedule() {
  static const std::vector<MixedStep> schedule = [] {
    std::mt19937_64 rng(20250611);
    std::uniform_int_distribution<uint32_t> slot(0, kLiveBlocks - 1);
    std::uniform_int_distribution<uint32_t> size(0, kMixedSizes.size() - 1);
    std::vector<MixedStep> s(kScheduleLength);
    for (MixedStep& step : s) step = MixedStep{slot(rng), size(rng)};
    return s;
  }();
  return schedule;
}

template <typename Setup>
void run_mixed(benchmark::State& state, Setup& s) {
  const std::vector<MixedStep>& schedule = mixed_schedule();
  using Handle = decltype(s.allocate(size_t{1}));
  std::array<Handle, kLiveBlocks> live{};
  for (size_t i = 0; i < kLiveBlocks; ++i) live[i] = s.allocate(kMixedSizes[i % kMixedSizes.size()]);
  // Warm: two passes over the schedule let the cache reach the segments the
  // workload needs; after that nearly every pair is served from the cache.
  for (int pass = 0; pass < 2; ++pass)
    for (const MixedStep& step : schedule) {
      s.free(live[step.slot]);
      live[step.slot] = s.allocate(kMixedSizes[step.size_index]);
    }
  const int64_t before = s.device.allocations;
  size_t i = 0;
  for (auto _ : state) {
    const MixedStep& step = schedule[i++ & (kScheduleLength - 1)];
    s.free(live[step.slot]);
    live[step.slot] = s.allocate(kMixedSizes[step.size_index]);
  }
  report_pairs(state, s.device.allocations - before);
  for (Handle h : live) s.free(h);
}

void BM_FrontMixed(benchmark::State& state, Observers which) {
  Front s(which);
  run_mixed(state, s);
}

void BM_EngineMixed(benchmark::State& state, Observers which) {
  Engine s(which);
  run_mixed(state, s);
}

BENCHMARK_CAPTURE(BM_FrontMixed, no_observers, Observers::kNone);
BENCHMARK_CAPTURE(BM_FrontMixed, stats, Observers::kStats);
BENCHMARK_CAPTURE(BM_FrontMixed, stats_history_off, Observers::kStatsHistoryOff);
BENCHMARK_CAPTURE(BM_FrontMixed, stats_history_on, Observers::kStatsHistoryOn);
BENCHMARK_CAPTURE(BM_EngineMixed, no_observers, Observers::kNone);
BENCHMARK_CAPTURE(BM_EngineMixed, stats, Observers::kStats);

}  // namespace
}  // namespace cachealloc

CACHEALLOC_BENCHMARK_MAIN();
