// The thread-safe front's two building blocks: the address -> Block table
// (checked against std::unordered_map under random operations, with
// clustered addresses that collide and wrap around the table) and the device
// lock (mutual exclusion under contention).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allocator/engine/blocks/block.h"
#include "allocator/front/device_mutex.h"
#include "allocator/front/pointer_table.h"
#include "gtest/gtest.h"

namespace cachealloc {
namespace {

// Distinct fake Block pointers; the table never dereferences them.
Block* fake_block(uintptr_t address) { return reinterpret_cast<Block*>(address ^ 0x1); }

TEST(PointerTable, EmptyTableFindsAndErasesNothing) {
  PointerTable t;
  EXPECT_EQ(t.find(0x200000), nullptr);
  EXPECT_EQ(t.erase(0x200000), nullptr);
  EXPECT_EQ(t.size(), 0u);
}

TEST(PointerTable, MatchesAMapUnderRandomInsertsAndErases) {
  std::mt19937_64 rng(7);
  PointerTable t;
  std::unordered_map<uintptr_t, Block*> ref;
  std::vector<uintptr_t> live;
  // Addresses from a few dense 512 B-aligned runs (blocks of one segment
  // sit next to each other) and a sparse spread, so probe runs form and
  // backward-shift deletion is exercised across the wrap-around.
  auto draw = [&] {
    const uintptr_t base = (rng() % 4 == 0) ? (rng() % (uintptr_t{1} << 40)) << 9
                                            : 0x7f0000000000 + (rng() % 4) * (uintptr_t{1} << 30);
    return base + (rng() % 4096) * 512 + 512;
  };
  for (int step = 0; step < 400000; ++step) {
    const bool grow = live.empty() || (rng() % 100) < (live.size() < 3000 ? 55 : 45);
    if (grow) {
      const uintptr_t a = draw();
      if (ref.count(a)) continue;
      t.insert(a, fake_block(a));
      ref.emplace(a, fake_block(a));
      live.push_back(a);
    } else {
      const size_t i = rng() % live.size();
      const uintptr_t a = live[i];
      ASSERT_EQ(t.erase(a), fake_block(a)) << "step " << step;
      ref.erase(a);
      live[i] = live.back();
      live.pop_back();
      ASSERT_EQ(t.erase(a), nullptr) << "erased twice, step " << step;
    }
    ASSERT_EQ(t.size(), ref.size());
    if (step % 997 == 0) {
      for (const auto& [a, b] : ref) ASSERT_EQ(t.find(a), b) << "step " << step;
      for (int k = 0; k < 32; ++k) {
        const uintptr_t a = draw();
        ASSERT_EQ(t.find(a), ref.count(a) ? ref[a] : nullptr);
      }
    }
  }
}

TEST(DeviceMutex, KeepsAContendedCounterExact) {
  DeviceMutex m;
  int64_t counter = 0;  // guarded by m; a lost update would show
  constexpr int kThreads = 4, kRounds = 200000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        std::lock_guard<DeviceMutex> lock(m);
        const int64_t seen = counter;
        if (r % 1024 == 0) std::this_thread::yield();  // hold it a while: sleepers
        counter = seen + 1;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, int64_t{kThreads} * kRounds);
}

// Holds of milliseconds (a device call under the lock) push waiters into
// their napping phase, with naps growing towards kMaxNap. A waiter must
// still notice a release within about one nap: measured here as the time
// from a holder's unlock to the next thread's lock ("handoff").
TEST(DeviceMutex, NappingWaitersNoticeAReleaseWithinANap) {
  using Clock = std::chrono::steady_clock;
  DeviceMutex m;
  int64_t counter = 0;
  int last_holder = -1;            // guarded by m
  Clock::time_point released;      // guarded by m: the last unlock
  std::vector<double> handoff_us;  // guarded by m
  constexpr int kThreads = 3, kRounds = 5;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < kRounds; ++r) {
        {
          std::lock_guard<DeviceMutex> lock(m);
          if (last_holder != -1 && last_holder != i)
            handoff_us.push_back(
                std::chrono::duration<double, std::micro>(Clock::now() - released).count());
          last_holder = i;
          const int64_t seen = counter;
          // Longer than the nap ramp takes to pass 1 ms (1+2+4+... us).
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          counter = seen + 1;
          released = Clock::now();
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // let others in
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, int64_t{kThreads} * kRounds);
  ASSERT_GE(handoff_us.size(), 5u) << "the waiters never got in between rounds";
  std::sort(handoff_us.begin(), handoff_us.end());
  // A nap is at most 200 us, plus the kernel's timer slack (~50 us); the
  // median allows for a loaded machine. Naps of 20 ms (a mutation of
  // kMaxNap) give a median handoff of several milliseconds.
  EXPECT_LT(handoff_us[handoff_us.size() / 2], 1000.0);
}

}  // namespace
}  // namespace cachealloc
