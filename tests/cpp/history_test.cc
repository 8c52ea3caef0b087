// HistoryRecorder: native's entries for engine events, the bounded ring, and
// timestamps (cheap ticks while recording, Unix microseconds when read).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
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
  EXPECT_EQ(t[0].action, EventKind::kSegmentAlloc);
  EXPECT_EQ(t[0].size, 2 * kMiB);
  EXPECT_EQ(t[1].action, EventKind::kAlloc);
  EXPECT_EQ(t[1].size, 1000u);  // what the caller asked for, not 1024
  EXPECT_EQ(t[1].address, kBase);
  EXPECT_EQ(t[2].action, EventKind::kFreeRequested);
  EXPECT_EQ(t[3].action, EventKind::kFreeCompleted);
  for (const TraceEntry& e : t) EXPECT_EQ(e.stream, kStreamA);
}

TEST(History, FullRingDropsOldestAndShrinkingKeepsNewest) {
  Recorded h;
  h.history.enable(3, true);
  for (int i = 0; i < 5; ++i) h.engine.free(h.engine.malloc(512 * (i + 1), kStreamA));
  // 1 segment_alloc + 5 x (alloc, free_requested, free_completed); newest 3.
  std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].action, EventKind::kAlloc);
  EXPECT_EQ(t[0].size, 2560u);
  EXPECT_EQ(t[2].action, EventKind::kFreeCompleted);
  h.history.enable(2, true);
  t = h.history.entries();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].action, EventKind::kFreeRequested);
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
  EXPECT_EQ(kept.back().action, EventKind::kFreeCompleted);
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
    if (t.action == EventKind::kFreeCompleted) completed.push_back(t.address);
  std::sort(waiting.begin(), waiting.end());  // by stream
  std::vector<uintptr_t> expected;
  for (const auto& [stream, address] : waiting) expected.push_back(address);
  EXPECT_EQ(completed, expected);
}

}  // namespace
}  // namespace cachealloc::testing

namespace cachealloc::testing {
namespace {

// The ring stores a cache-hit free as one record of two entries, so its
// bound is kept by trimming when read. Against a plain list of entries
// (native's ring): random events, contexts, snapshots and re-enables with
// other sizes must give the same entries, field by field.
TEST(History, RingMatchesAPlainBoundedListOfEntries) {
  std::mt19937_64 rng(7);
  HistoryRecorder history;
  std::vector<TraceEntry> model;  // the newest `max` entries, oldest first
  size_t max = 5;
  bool keep_context = true;
  history.enable(max, keep_context);
  auto push = [&](TraceEntry t) {
    if (!keep_context) t.context = nullptr;
    model.push_back(std::move(t));
    if (model.size() > max) model.erase(model.begin());
  };
  std::vector<ContextPtr> contexts;
  for (int i = 0; i < 4; ++i)
    contexts.push_back(std::make_shared<CallContext>(
        CallContext{{StackFrame{"f" + std::to_string(i), "x.py", i}}, nullptr}));
  for (int step = 0; step < 20000; ++step) {
    const unsigned pick = static_cast<unsigned>(rng() % 100);
    if (pick < 2) {  // resize (sometimes to the same size), keep or drop frames
      max = 1 + rng() % 9;
      keep_context = rng() % 4 != 0;
      history.enable(max, keep_context);
      if (model.size() > max) model.erase(model.begin(), model.end() - static_cast<ptrdiff_t>(max));
    } else if (pick < 4) {
      history.record_snapshot(0, step);
      TraceEntry t;
      t.action = EventKind::kSnapshot;
      t.size = static_cast<size_t>(step);
      push(t);
    } else {
      static constexpr EventKind kKinds[] = {
          EventKind::kAlloc,        EventKind::kFree,
          EventKind::kAlloc,        EventKind::kFree,
          EventKind::kSegmentAlloc, EventKind::kSegmentFree,
          EventKind::kFreeRequested, EventKind::kFreeCompleted,
          EventKind::kOom,          EventKind::kAllocRetry};
      EngineEvent e(kKinds[rng() % std::size(kKinds)]);
      e.device = static_cast<int>(rng() % 3);
      e.stream = rng() % 4;
      e.address = 512 * (1 + rng() % 1000);
      e.size = 512 * (1 + rng() % 100);
      e.requested = e.size - rng() % 512;
      const ContextPtr ctx = rng() % 3 ? contexts[rng() % contexts.size()] : nullptr;
      e.context = &ctx;
      history.on_event(e);
      TraceEntry t;
      t.device = e.device;
      t.stream = e.stream;
      t.address = e.address;
      t.size = e.requested;
      t.context = ctx;
      switch (e.kind) {
        case EventKind::kAlloc: t.action = EventKind::kAlloc; break;
        case EventKind::kFree:
          t.action = EventKind::kFreeRequested;
          push(t);
          t.action = EventKind::kFreeCompleted;
          break;
        case EventKind::kSegmentAlloc:
        case EventKind::kSegmentFree:
        case EventKind::kOom: t.action = e.kind, t.size = e.size; break;
        case EventKind::kFreeRequested:
        case EventKind::kFreeCompleted: t.action = e.kind; break;
        default: continue;  // retries are not traced
      }
      push(t);
    }
    if (step % 7 != 0 && step < 19990) continue;
    const std::vector<TraceEntry> got = history.entries();
    ASSERT_EQ(got.size(), model.size()) << "step " << step;
    ASSERT_EQ(history.size(), model.size()) << "step " << step;
    for (size_t k = 0; k < got.size(); ++k) {
      const TraceEntry& a = got[k];
      const TraceEntry& b = model[k];
      ASSERT_EQ(a.action, b.action) << "step " << step << " entry " << k;
      ASSERT_EQ(a.device, b.device) << "step " << step << " entry " << k;
      ASSERT_EQ(a.stream, b.stream) << "step " << step << " entry " << k;
      ASSERT_EQ(a.address, b.address) << "step " << step << " entry " << k;
      ASSERT_EQ(a.size, b.size) << "step " << step << " entry " << k;
      ASSERT_EQ(a.context, b.context) << "step " << step << " entry " << k;
      if (k) {
        ASSERT_GE(a.time_us, got[k - 1].time_us) << "step " << step << " entry " << k;
      }
    }
  }
  history.disable();
  EXPECT_EQ(history.size(), 0u);
  EXPECT_TRUE(history.entries().empty());
}

// Frames held by entries that left the ring are released when the ring
// reuses their record's slot.
TEST(History, DroppedEntriesReleaseTheirFrames) {
  HistoryRecorder history;
  history.enable(2, true);
  ContextPtr ctx = std::make_shared<CallContext>();
  std::weak_ptr<const CallContext> watch = ctx;
  EngineEvent e(EventKind::kAlloc);
  e.context = &ctx;
  history.on_event(e);
  ctx.reset();
  EXPECT_FALSE(watch.expired());
  const ContextPtr none;
  e.context = &none;
  history.on_event(e);
  history.on_event(e);
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace cachealloc::testing

namespace cachealloc::testing {
namespace {

std::vector<EventKind> actions_of(const HistoryRecorder& h) {
  std::vector<EventKind> out;
  for (const TraceEntry& e : h.entries()) out.push_back(e.action);
  return out;
}

TEST(History, ActionNamesParseBackAndNothingElseDoes) {
  // kRecordedActions holds every action but kUserDefined, each once.
  ActionMask seen = 0;
  for (auto a : kRecordedActions) {
    EXPECT_EQ(parse_action(action_name(a)), a);
    EXPECT_NE(a, EventKind::kUserDefined);
    EXPECT_EQ(seen & action_bit(a), 0) << action_name(a);
    seen |= action_bit(a);
  }
  EXPECT_EQ(seen | action_bit(EventKind::kUserDefined),
            action_bit(EventKind::kUserDefined) * 2 - 1);
  EXPECT_EQ(parse_action("user_defined"), EventKind::kUserDefined);
  EXPECT_FALSE(parse_action("allocs"));
  EXPECT_FALSE(parse_action(""));
  EXPECT_FALSE(parse_action("Alloc"));
}

// native's skip_actions: a skipped action is left out wherever it occurs,
// including either half of a cache-hit free, with a full ring (its steady
// state) and while it fills. (A non-empty set always takes the slow path;
// the last step checks that clearing it brings back the fast path's
// two-entry free.)
TEST(History, SkippedActionsAreLeftOut) {
  using A = EventKind;
  for (const size_t ring : {size_t{100}, size_t{3}}) {
    Recorded h;
    h.history.enable(ring, true);
    h.history.set_skipped(action_bit(A::kFreeRequested) | action_bit(A::kSegmentAlloc));
    for (int i = 0; i < 4; ++i) h.engine.free(h.engine.malloc(512, kStreamA));
    std::vector<A> want;
    for (int i = 0; i < 4; ++i) want.insert(want.end(), {A::kAlloc, A::kFreeCompleted});
    if (want.size() > ring) want.erase(want.begin(), want.end() - static_cast<ptrdiff_t>(ring));
    EXPECT_EQ(actions_of(h.history), want) << "ring " << ring;

    h.history.set_skipped(action_bit(A::kFreeCompleted) | action_bit(A::kAlloc));
    h.engine.free(h.engine.malloc(512, kStreamA));
    EXPECT_EQ(actions_of(h.history).back(), A::kFreeRequested);
    h.history.set_skipped(action_bit(A::kFreeCompleted) | action_bit(A::kFreeRequested) |
                          action_bit(A::kSnapshot));
    const size_t before = h.history.entries().size();
    h.engine.free(h.engine.malloc(512, kStreamA));
    h.history.record_snapshot(0, 0);
    const std::vector<A> after = actions_of(h.history);
    if (ring == 100) {
      EXPECT_EQ(after.size(), before + 1);  // the alloc only
    }
    EXPECT_EQ(after.back(), A::kAlloc);
    // Back to recording everything: the fast path's two-entry free again.
    h.history.set_skipped(0);
    h.engine.free(h.engine.malloc(512, kStreamA));
    const std::vector<A> all = actions_of(h.history);
    ASSERT_GE(all.size(), 3u);
    EXPECT_EQ(std::vector<A>(all.end() - 3, all.end()),
              (std::vector<A>{A::kAlloc, A::kFreeRequested, A::kFreeCompleted}));
  }
}

TEST(History, SkipWorksWithASetClock) {
  Recorded h;
  int64_t now = 100;
  h.history.set_clock([&now] { return now++; });
  h.history.enable(10, true);
  h.history.set_skipped(action_bit(EventKind::kFreeCompleted));
  h.engine.free(h.engine.malloc(512, kStreamA));
  const std::vector<TraceEntry> t = h.history.entries();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].action, EventKind::kFreeRequested);
  // The clock is read only for recorded entries.
  EXPECT_EQ(t[2].time_us, 102);
  EXPECT_EQ(now, 103);
}

}  // namespace
}  // namespace cachealloc::testing
