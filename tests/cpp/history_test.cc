// HistoryRecorder: native's entries for engine events, the bounded ring, and
// timestamps (cheap ticks while recording, Unix microseconds when read).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "stats/history.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

int64_t unix_us() { return HistoryRecorder::system_clock_us(); }

struct Recorded : Harness {
  Recorded() { engine.add_observer(&history); }
  ~Recorded() { engine.remove_observer(&history); }
  HistoryRecorder history;
};

TEST(History, RecordsNativeActionsWithRequestedSizes) {
  Recorded h;
  h.history.enable(100, true);
  Block* b = h.engine.malloc(1000, kStreamA);
  h.engine.free(b);
  const std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].action, TraceAction::kSegmentAlloc);
  EXPECT_EQ(t[0].size, 2 * kMiB);
  EXPECT_EQ(t[1].action, TraceAction::kAlloc);
  EXPECT_EQ(t[1].size, 1000u);  // what the caller asked for, not 1024
  EXPECT_EQ(t[1].address, kBase);
  EXPECT_EQ(t[2].action, TraceAction::kFreeRequested);
  EXPECT_EQ(t[3].action, TraceAction::kFreeCompleted);
  for (const TraceEntry& e : t) EXPECT_EQ(e.stream, kStreamA);
}

TEST(History, FullRingDropsOldestAndShrinkingKeepsNewest) {
  Recorded h;
  h.history.enable(3, true);
  for (int i = 0; i < 5; ++i) h.engine.free(h.engine.malloc(512 * (i + 1), kStreamA));
  // 1 segment_alloc + 5 x (alloc, free_requested, free_completed); newest 3.
  std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].action, TraceAction::kAlloc);
  EXPECT_EQ(t[0].size, 2560u);
  EXPECT_EQ(t[2].action, TraceAction::kFreeCompleted);
  h.history.enable(2, true);
  t = h.history.entries();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].action, TraceAction::kFreeRequested);
  h.history.disable();
  EXPECT_TRUE(h.history.entries().empty());
}

TEST(History, TimesAreUnixMicrosecondsInOrderAndSurviveRingRebuilds) {
  Recorded h;
  h.history.enable(100, true);
  const int64_t before = unix_us();
  h.engine.free(h.engine.malloc(512, kStreamA));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  h.engine.free(h.engine.malloc(512, kStreamA));
  const int64_t after = unix_us();
  std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 7u);
  constexpr int64_t kSlackUs = 2000;  // calibration skew and scheduling
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_GE(t[i].time_us, before - kSlackUs) << i;
    EXPECT_LE(t[i].time_us, after + kSlackUs) << i;
    if (i) {
      EXPECT_GE(t[i].time_us, t[i - 1].time_us) << i;
    }
  }
  // The 30 ms sleep shows up as 30 ms (the tick rate is calibrated).
  const int64_t gap = t[4].time_us - t[3].time_us;
  EXPECT_GE(gap, 30000 - kSlackUs);
  EXPECT_LE(gap, 30000 + 20000);  // a loaded machine may oversleep
  // Rebuilding the ring must not convert twice: shrinking it (7 -> 3)...
  const int64_t last = t.back().time_us;
  h.history.enable(3, true);
  std::vector<TraceEntry> kept = h.history.entries();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_NEAR(static_cast<double>(kept.back().time_us), static_cast<double>(last), 1000.0);
  // ...and growing it after it wrapped (its oldest entry is mid-ring).
  h.engine.free(h.engine.malloc(512, kStreamA));
  const int64_t newest = h.history.entries().back().time_us;
  EXPECT_GE(newest, last);
  h.history.enable(50, true);
  kept = h.history.entries();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.back().action, TraceAction::kFreeCompleted);
  EXPECT_NEAR(static_cast<double>(kept.back().time_us), static_cast<double>(newest), 1000.0);
  EXPECT_LE(kept.back().time_us, unix_us() + kSlackUs);
}

TEST(History, ASetClockStampsEntriesExactly) {
  Recorded h;
  int64_t now = 1234;
  h.history.set_clock([&now] { return now++; });
  h.history.enable(10, true);
  h.engine.free(h.engine.malloc(512, kStreamA));
  const std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].time_us, 1234 + static_cast<int64_t>(i));
}

}  // namespace
}  // namespace cachealloc::testing

namespace cachealloc::testing {
namespace {

// Blocks waiting on different streams are freed in stream order, the same in
// every run (the queues were once a hash map with a per-process seed).
TEST(History, BlocksWaitingOnSeveralStreamsAreFreedInStreamOrder) {
  Recorded h;
  h.history.enable(100, true);
  h.device.hold_events(true);
  // Twelve streams in scrambled order: a hash map's order would not be
  // sorted (and would change between runs).
  std::vector<StreamId> streams;
  for (uint64_t i = 0; i < 12; ++i) streams.push_back(0x1000 + ((i * 7) % 12) * 0x100);
  std::vector<std::pair<StreamId, uintptr_t>> waiting;  // (stream, block address)
  for (StreamId s : streams) {
    Block* b = h.engine.malloc(12 * kMiB, kStreamA);
    h.engine.record_stream(b, s);
    waiting.emplace_back(s, b->address);
    h.engine.free(b);
  }
  h.device.complete_events();
  h.engine.malloc(512, kStreamA);  // collects every completed event
  std::vector<uintptr_t> completed;
  for (const TraceEntry& t : h.history.entries())
    if (t.action == TraceAction::kFreeCompleted) completed.push_back(t.address);
  std::sort(waiting.begin(), waiting.end());  // by stream
  std::vector<uintptr_t> expected;
  for (const auto& [stream, address] : waiting) expected.push_back(address);
  EXPECT_EQ(completed, expected);
}

}  // namespace
}  // namespace cachealloc::testing
