// Tests of WhatIfDevice (lab/whatif_device.h), the device of the lab's
// what-if replays: first-fit placement by address, hints, and the cost of a
// first fit (a fuzzed trace with one huge request hung policy:expandable).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "allocator/config/config.h"
#include "lab/lab_config.h"
#include "lab/request_stream.h"
#include "lab/whatif.h"
#include "lab/whatif_device.h"

namespace cachealloc {
namespace {

constexpr size_t kAlign = WhatIfDevice::kAlignment;

// Placement as WhatIfDevice documents it, the slow obvious way: a hint of
// exactly `bytes` whose range is free, else the lowest aligned address from
// kBase on where `bytes` fit below the capacity.
class ReferenceFirstFit {
 public:
  explicit ReferenceFirstFit(size_t capacity) : capacity_(capacity / kAlign * kAlign) {}
  uintptr_t allocate(size_t bytes, uintptr_t hint) {
    const size_t size = aligned(bytes);
    if (bytes == 0 || size > capacity_ - used_) return 0;
    if (hint != 0 && hint_free(hint, size)) {
      ranges_.emplace(hint, bytes);
      used_ += size;
      return hint;
    }
    uintptr_t candidate = WhatIfDevice::kBase;
    for (const auto& [addr, length] : ranges_) {
      if (addr >= candidate && addr - candidate >= size) break;
      candidate = std::max(candidate, addr + aligned(length));
    }
    if (candidate + size > WhatIfDevice::kBase + capacity_) return 0;
    ranges_.emplace(candidate, bytes);
    used_ += size;
    return candidate;
  }
  void release(uintptr_t address) {
    used_ -= aligned(ranges_.at(address));
    ranges_.erase(address);
  }

 private:
  static size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
  bool hint_free(uintptr_t address, size_t size) const {
    if (address < WhatIfDevice::kBase || address % kAlign != 0 ||
        address - WhatIfDevice::kBase + size > capacity_)
      return false;
    for (const auto& [addr, length] : ranges_)
      if (addr < address + size && address < addr + aligned(length)) return false;
    return true;
  }
  size_t capacity_;
  size_t used_ = 0;
  std::map<uintptr_t, size_t> ranges_;
};

TEST(WhatIfDevice, FirstFitPlacesEverySegmentAsAFullScanWould) {
  // Random allocations and releases (more sizes than the device keeps
  // cursors for, gaps of every size, some placed by hints) on a small
  // device, so that first fit has to walk gaps, skip ones too small, and
  // fail when fragmented; the device must agree with the reference at every
  // step.
  std::mt19937_64 rng(7);
  constexpr size_t kCapacity = 256 * kAlign;
  WhatIfDevice device(kCapacity);
  ReferenceFirstFit reference(kCapacity);
  std::vector<std::pair<uintptr_t, size_t>> live;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && rng() % 5 < 2) {
      const size_t k = rng() % live.size();
      device.release(0, live[k].first, live[k].second);
      reference.release(live[k].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const size_t bytes = (1 + rng() % 12) * kAlign - (rng() % 2 ? rng() % kAlign : 0);
    uintptr_t hint = 0;
    if (rng() % 4 == 0) {
      hint = WhatIfDevice::kBase + (rng() % 260) * kAlign;
      device.offer_address(hint, bytes);
    }
    const uintptr_t got = device.allocate(0, bytes, 0);
    ASSERT_EQ(got, reference.allocate(bytes, hint)) << "step " << step << ", " << bytes << " bytes";
    if (got != 0) live.emplace_back(got, bytes);
  }
}

TEST(WhatIfDevice, TopDownPlacesEachSegmentAtTheTopOfTheHighestGapThatHoldsIt) {
  // Without releases: each segment right below the previous one, from the
  // device's end down (the CUDA driver's usual order). With releases: the
  // highest gap that holds the segment, at that gap's top; a hint still
  // wins; a full device refuses.
  constexpr size_t kCapacity = 64 * kAlign;
  const uintptr_t end = WhatIfDevice::kBase + kCapacity;
  WhatIfDevice device(kCapacity, SegmentPlacement::kTopDown);
  const uintptr_t a = device.allocate(0, 3 * kAlign, 0);
  const uintptr_t b = device.allocate(0, kAlign + 1, 0);  // footprint 2 pages
  const uintptr_t c = device.allocate(0, kAlign, 0);
  EXPECT_EQ(a, end - 3 * kAlign);
  EXPECT_EQ(b, a - 2 * kAlign);
  EXPECT_EQ(c, b - kAlign);
  device.release(0, a, 3 * kAlign);  // a 3-page gap at the top
  EXPECT_EQ(device.allocate(0, 4 * kAlign, 0), c - 4 * kAlign);  // too big for it
  EXPECT_EQ(device.allocate(0, kAlign, 0), end - kAlign);         // its top page
  const uintptr_t hinted = WhatIfDevice::kBase + 5 * kAlign;
  device.offer_address(hinted, kAlign);
  EXPECT_EQ(device.allocate(0, kAlign, 0), hinted);
  EXPECT_EQ(device.allocate(0, kCapacity, 0), 0u);  // more than is free
}

TEST(WhatIfDevice, PlacementNamesParseAndUnknownOnesAreRefused) {
  EXPECT_EQ(parse_segment_placement("top-down"), SegmentPlacement::kTopDown);
  EXPECT_EQ(parse_segment_placement("first-fit"), SegmentPlacement::kFirstFit);
  EXPECT_EQ(segment_placement_name(SegmentPlacement::kTopDown), "top-down");
  EXPECT_EQ(parse_segment_placement("shuffled:42"),
            SegmentPlacement(SegmentPlacement::kShuffled, 42));
  EXPECT_EQ(segment_placement_name(parse_segment_placement("shuffled:7")), "shuffled:7");
  EXPECT_THROW(parse_segment_placement("sideways"), std::invalid_argument);
  EXPECT_THROW(parse_segment_placement("shuffled:"), std::invalid_argument);
  EXPECT_THROW(parse_segment_placement("shuffled:-1"), std::invalid_argument);
  EXPECT_THROW(parse_segment_placement("shuffled:1x"), std::invalid_argument);
  EXPECT_THROW(parse_segment_placement("shuffled:007"), std::invalid_argument);
  EXPECT_THROW(parse_segment_placement("shuffled:1234567890123456789"), std::invalid_argument);
  EXPECT_EQ(parse_segment_placement("shuffled:0"), SegmentPlacement(SegmentPlacement::kShuffled, 0));
}

TEST(WhatIfDevice, ShuffledPlacesSegmentsInASeededRandomOrder) {
  // The same seed gives the same addresses; another seed another order;
  // every address is on the grid, inside the device, and free; a hint still
  // wins; a device too full for the random tries falls back to first fit.
  constexpr size_t kCapacity = size_t{1} << 40;
  auto addresses = [](uint64_t seed) {
    WhatIfDevice device(kCapacity, SegmentPlacement(SegmentPlacement::kShuffled, seed));
    std::vector<uintptr_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(device.allocate(0, (i % 5 + 1) * kAlign, 0));
    return out;
  };
  const std::vector<uintptr_t> a = addresses(1), again = addresses(1), b = addresses(2);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
  std::vector<std::pair<uintptr_t, size_t>> extents;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NE(a[i], 0u);
    EXPECT_EQ((a[i] - WhatIfDevice::kBase) % kAlign, 0u);
    EXPECT_LE(a[i] + (i % 5 + 1) * kAlign, WhatIfDevice::kBase + kCapacity);
    extents.emplace_back(a[i], (i % 5 + 1) * kAlign);
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i)
    EXPECT_LE(extents[i - 1].first + extents[i - 1].second, extents[i].first);
  // Not sorted either way: a random order, not a disguised top down.
  EXPECT_FALSE(std::is_sorted(a.begin(), a.end()));
  EXPECT_FALSE(std::is_sorted(a.rbegin(), a.rend()));

  WhatIfDevice small(4 * kAlign, SegmentPlacement(SegmentPlacement::kShuffled, 3));
  const uintptr_t hinted = WhatIfDevice::kBase + kAlign;
  small.offer_address(hinted, kAlign);
  EXPECT_EQ(small.allocate(0, kAlign, 0), hinted);
  std::vector<uintptr_t> rest;
  for (int i = 0; i < 3; ++i) rest.push_back(small.allocate(0, kAlign, 0));
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(rest, (std::vector<uintptr_t>{WhatIfDevice::kBase, WhatIfDevice::kBase + 2 * kAlign,
                                           WhatIfDevice::kBase + 3 * kAlign}));
  EXPECT_EQ(small.allocate(0, kAlign, 0), 0u);  // full
}

TEST(WhatIfDevice, ShuffledFallsBackToFirstFitWhenEveryRandomTryIsTaken) {
  // 4,096 slots, all but the top two held by hinted segments: a random try
  // lands on a free slot with a chance of 2 / 4,096, so all 64 tries miss
  // with a chance above 0.96 for any seed, and the segment goes first fit:
  // the lowest free slot. The seeds tried here all fall back. After a
  // release below, first fit (and so the fallback) finds that gap.
  constexpr size_t kSlots = 4096;
  const uintptr_t base = WhatIfDevice::kBase;
  int fell_back = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    WhatIfDevice device(kSlots * kAlign, SegmentPlacement(SegmentPlacement::kShuffled, seed));
    for (size_t i = 0; i + 2 < kSlots; ++i) {
      device.offer_address(base + i * kAlign, kAlign);
      ASSERT_EQ(device.allocate(0, kAlign, 0), base + i * kAlign);
    }
    const uintptr_t at = device.allocate(0, kAlign, 0);
    ASSERT_TRUE(at == base + (kSlots - 2) * kAlign || at == base + (kSlots - 1) * kAlign);
    fell_back += at == base + (kSlots - 2) * kAlign;  // first fit's answer
    device.release(0, base + 5 * kAlign, kAlign);
    // The only free slots now: 5 and one at the top; a two-slot segment
    // fits neither, a one-slot one goes to a free slot whichever way.
    EXPECT_EQ(device.allocate(0, 2 * kAlign, 0), 0u);
    const uintptr_t next = device.allocate(0, kAlign, 0);
    EXPECT_TRUE(next == base + 5 * kAlign || next == base + (kSlots - 1) * kAlign ||
                next == base + (kSlots - 2) * kAlign);
    EXPECT_NE(next, at);
  }
  EXPECT_GE(fell_back, 7);  // each seed falls back with a chance above 0.96
}

TEST(WhatIfDevice, PagesAfterAHoleTooSmallForThemAreStillPlacedInLogTime) {
  // A 2 MiB hole at the bottom, then 100000 pages of 20 MiB: each first fit
  // must not walk every page placed before it (5e9 steps).
  WhatIfDevice device(size_t{4} << 40);
  const uintptr_t a = device.allocate(0, kAlign, 0);
  const uintptr_t b = device.allocate(0, kAlign, 0);
  ASSERT_NE(device.allocate(0, kAlign, 0), 0u);
  device.release(0, b, kAlign);
  const auto start = std::chrono::steady_clock::now();
  uintptr_t last = 0;
  for (int i = 0; i < 100000; ++i) {
    const uintptr_t page = device.allocate(0, 10 * kAlign, 0);
    ASSERT_GT(page, last);
    last = page;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);  // Generous, for sanitized builds: it takes milliseconds.
  EXPECT_EQ(device.allocate(0, kAlign, 0), b);  // The hole is still found first.
  EXPECT_EQ(a, WhatIfDevice::kBase);
}

TEST(WhatIfDevice, AHugeExpandableRequestIsRefusedWithoutScanningPages) {
  // One request of 1 TiB under expandable_segments:True asks the 1 TiB
  // device for about 52000 pages of 20 MiB in one mapping, which it refuses
  // whole; the engine reports an OOM. (The lab's retired emulation mapped
  // page by page, and first fit once scanned every live page for each new
  // one: more than 5 minutes under ASan for this one-event trace.)
  RequestStream stream;
  stream.requests.push_back(Request{uint64_t{1} << 40, 0, 0, RequestKind::kAlloc});
  stream.time_us.push_back(0);
  stream.streams.push_back(0);
  stream.slots = 1;
  stream.recorded_events = 1;
  const auto start = std::chrono::steady_clock::now();
  const WhatIfResult r =
      run_whatif(stream, parse_lab_config("expandable_segments:True", AllocatorConfig{}),
                 WhatIfOptions{});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(r.final_reserved, 0u);
  // Generous, for slow sanitized builds; the quadratic scan is far above.
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
}  // namespace cachealloc
