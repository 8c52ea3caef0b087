// HistoryRecorder when memory runs out: an allocation that fails while the
// ring or its contexts grow, or while enable() rebuilds, throws
// std::bad_alloc and leaves the recorded entries as they were; the recorder
// keeps working afterwards. Its own test program: it replaces the global
// operator new to make the next allocation fail.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "stats/history.h"

// Armed: the next allocation throws.
static std::atomic<bool> g_fail{false};
void* operator new(std::size_t n) {
  if (g_fail.exchange(false)) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace cachealloc::testing {
namespace {

// A one-frame context, distinct per i.
ContextPtr Ctx(int i) {
  return std::make_shared<CallContext>(CallContext{{StackFrame{"f" + std::to_string(i), "x.py", i}}, nullptr});
}
// A 512-byte block event of kind k at addr.
EngineEvent Ev(EventKind k, uintptr_t addr) {
  EngineEvent e(k);
  e.address = addr;
  e.size = e.requested = 512;
  return e;
}
// What entries() shows, in comparable form (times only when asked: ticks are
// converted with a fresh calibration at each read, so the same entry's
// microseconds may differ by one between two reads).
struct Flat { EventKind a; uintptr_t addr; const CallContext* ctx; int64_t t; };
std::vector<Flat> Flatten(const HistoryRecorder& h, bool times = false) {
  std::vector<Flat> out;
  for (auto& t : h.entries()) out.push_back({t.action, t.address, t.context.get(), times ? t.time_us : 0});
  return out;
}
bool Same(const std::vector<Flat>& a, const std::vector<Flat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].a != b[i].a || a[i].addr != b[i].addr || a[i].ctx != b[i].ctx || a[i].t != b[i].t) return false;
  return true;
}

TEST(HistoryAllocFailure, BadAllocLeavesTheRingAsItWas) {
  for (int variant = 0; variant < 4; ++variant) {
    HistoryRecorder h;
    const size_t max = variant % 2 ? 16 : 8;
    h.enable(max, true);
    ContextPtr none;
    for (int i = 0; i < (variant % 2 ? 8 : 5); ++i) {
      EngineEvent e = Ev(i % 2 ? EventKind::kFree : EventKind::kAlloc, 512 * (i + 1));
      e.context = &none;
      h.on_event(e);
    }
    auto before = Flatten(h);
    ContextPtr ctx = Ctx(1);
    EngineEvent e = Ev(EventKind::kAlloc, 99 * 512);
    e.context = variant == 0 ? &ctx : &none;
    g_fail = true;
    bool threw = false;
    try {
      if (variant <= 1) h.on_event(e);
      else if (variant == 2) h.enable(3, true);
      else h.record_snapshot(0, 1);
    } catch (const std::bad_alloc&) { threw = true; }
    g_fail = false;
    // Variants: 0 the contexts array grows, 1 the ring grows, 2 enable()
    // rebuilds, 3 record() grows the ring.
    EXPECT_TRUE(threw) << "variant " << variant;
    if (threw) {
      EXPECT_TRUE(Same(before, Flatten(h))) << "variant " << variant;
      EXPECT_EQ(h.size(), before.size()) << "variant " << variant;
    }
    // the recorder must still work afterwards
    for (int i = 0; i < 20; ++i) { e.address = 512 * (100 + i); e.context = &ctx; h.on_event(e); }
    EXPECT_EQ(h.entries().size(), variant == 2 && !threw ? 3u : max);
  }
}

// set_clock while enabled and full: events after it carry the clock's times.
TEST(HistoryAllocFailure, ASetClockTakesOverFromTicksWhileRecording) {
  HistoryRecorder h;
  h.enable(4, false);
  ContextPtr none;
  EngineEvent e = Ev(EventKind::kFree, 512);
  e.context = &none;
  for (int i = 0; i < 10; ++i) h.on_event(e);  // full: fast path
  int64_t t = 1000;
  h.set_clock([&] { return t++; });
  for (int i = 0; i < 4; ++i) h.on_event(e);  // 8 entries via clock, 2 records each
  auto got = h.entries();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].time_us, 1004);
  EXPECT_EQ(got[3].time_us, 1007);
  EXPECT_EQ(got[0].action, EventKind::kFreeRequested);
  EXPECT_EQ(got[3].action, EventKind::kFreeCompleted);
  h.set_clock(nullptr);
  for (int i = 0; i < 4; ++i) h.on_event(e);
  got = h.entries();
  ASSERT_EQ(got.size(), 4u);
  const int64_t now = HistoryRecorder::system_clock_us();
  for (auto& x : got) EXPECT_NEAR(double(x.time_us), double(now), 5e6);
}

}  // namespace
}  // namespace cachealloc::testing
