// A soak: 10 million randomized operations through one engine
// (DeviceCachingAllocator on a SimulatedDevice, with the stats collector
// and a 100,000-entry history attached): mallocs of every size class on 4
// streams, frees, record_stream with events held pending for a while,
// empty_cache, and expandable segments switched on and off. The engine's
// invariants are checked every 10,000 operations; at the end every block is
// freed and the cache emptied, and allocated, reserved, the stats' current
// bytes and the device's used bytes must all be exactly 0.
//
// Prints the time and the peak host memory (docs/benchmarks.md). Not in
// CI. Usage: soak [operations=10000000] [seed=1]. Exit 1 on any failure.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/base/errors.h"
#include "allocator/sim/simulated_device.h"
#include "stats/device_stats.h"
#include "stats/history.h"

namespace ca = cachealloc;

int main(int argc, char** argv) {
  const uint64_t ops = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  constexpr uint64_t kCheckEvery = 10'000;
  constexpr size_t kMaxHeld = 4096;

  ca::AllocatorConfig plain = ca::AllocatorConfig::parse("");
  ca::AllocatorConfig expandable = ca::AllocatorConfig::parse("expandable_segments:True");
  ca::SimulatedDevice device(size_t{16} << 30);
  ca::DeviceCachingAllocator engine(0, plain, device);
  ca::StatsCollector stats(plain.max_split_size_stat());
  ca::HistoryRecorder history;
  history.enable(100'000, false);
  engine.add_observer(&stats);
  engine.add_observer(&history);

  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return rng() % n; };
  auto size = [&]() -> size_t {
    switch (pick(4)) {
      case 0: return 1 + pick(4096);
      case 1: return 4096 + pick(1 << 20);
      case 2: return (1 << 20) + pick(16 << 20);
      default: return (16 << 20) + pick(112 << 20);
    }
  };
  std::vector<ca::Block*> held;
  uint64_t ooms = 0, checks = 0;
  bool held_events = false, on_expandable = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (uint64_t i = 1; i <= ops; ++i) {
      const uint64_t r = pick(1000);
      if (r < 480) {
        if (held.size() < kMaxHeld) {
          try {
            held.push_back(engine.malloc(size(), 0x100 * (1 + pick(4))));
          } catch (const ca::OutOfMemoryError&) {
            ++ooms;
          }
        }
      } else if (r < 960) {
        if (!held.empty()) {
          const size_t k = pick(held.size());
          engine.free(held[k]);
          held[k] = held.back();
          held.pop_back();
        }
      } else if (r < 990) {
        if (!held.empty()) engine.record_stream(held[pick(held.size())], 0x100 * (1 + pick(4)));
      } else if (r < 995) {
        // Events stay pending for a while, then all complete.
        held_events = !held_events;
        device.hold_events(held_events);
        if (!held_events) device.complete_events();
      } else if (r < 999) {
        engine.empty_cache();
      } else if (pick(200) == 0) {
        on_expandable = !on_expandable;
        engine.apply_config(on_expandable ? expandable : plain);
      }
      if (i % kCheckEvery == 0) {
        engine.check_invariants();
        device.check();
        ++checks;
      }
    }
    for (ca::Block* b : held) engine.free(b);
    held.clear();
    device.hold_events(false);
    device.complete_events();
    engine.empty_cache();
    engine.check_invariants();
    device.check();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak: FAILED (seed %llu): %s\n", static_cast<unsigned long long>(seed),
                 e.what());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ca::DeviceStats s = stats.stats();
  const bool exact = engine.allocated_bytes() == 0 && engine.reserved_bytes() == 0 &&
                     device.used_bytes() == 0 && device.live_segments() == 0 &&
                     device.mapped_pages() == 0 &&
                     s.allocated_bytes[ca::kAllPools].current == 0 &&
                     s.reserved_bytes[ca::kAllPools].current == 0 &&
                     s.active_bytes[ca::kAllPools].current == 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("soak: %llu operations (seed %llu) in %.1f s (%.0f ns/op), %llu invariant checks, "
              "%llu OOMs, peak host memory %.1f MiB; at the end allocated %zu, reserved %zu, "
              "device used %zu bytes: %s\n",
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(seed), seconds,
              seconds * 1e9 / static_cast<double>(ops), static_cast<unsigned long long>(checks),
              static_cast<unsigned long long>(ooms), ru.ru_maxrss / 1024.0,
              engine.allocated_bytes(), engine.reserved_bytes(), device.used_bytes(),
              exact ? "exact" : "NOT EXACT");
  engine.remove_observer(&history);
  engine.remove_observer(&stats);
  return exact ? 0 : 1;
}
