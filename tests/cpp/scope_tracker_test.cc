// ScopeTracker: exact per-scope peaks and totals, checked against numbers
// worked out by hand (block rounding included) and, on a long random run
// with random nesting, against a brute-force oracle that sees every event.
#include "stats/scope_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/base/errors.h"
#include "allocator/sim/simulated_device.h"
#include "stats/device_stats.h"

namespace cachealloc {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

struct Engine {
  explicit Engine(size_t capacity = size_t{8} << 30)
      : config(AllocatorConfig::parse("")),
        device(capacity),
        engine(0, config, device),
        stats(config.max_split_size_stat()) {
    engine.add_observer(&stats);
    engine.add_observer(&scopes);
  }
  ~Engine() {
    engine.remove_observer(&scopes);
    engine.remove_observer(&stats);
  }
  Block* alloc(size_t bytes) { return engine.malloc(bytes, 0); }
  void free(Block* b) { engine.free(b); }
  int64_t allocated() const { return stats.stats().allocated_bytes[kAllPools].current; }
  int64_t reserved() const { return stats.stats().reserved_bytes[kAllPools].current; }

  AllocatorConfig config;
  SimulatedDevice device;
  DeviceCachingAllocator engine;
  StatsCollector stats;
  ScopeTracker scopes;
};

TEST(ScopeTracker, PeakIsHighestAllocatedWhileOpenCountingBlockSizes) {
  Engine e;
  Block* before = e.alloc(1000);  // 1024 B block, outside the scope
  const uint64_t id = e.scopes.open();
  Block* b = e.alloc(4096);       // 5120
  Block* c = e.alloc(1000);       // 6144: the peak
  e.free(b);                      // 2048
  Block* d = e.alloc(2048);       // 4096
  const ScopeResult r = e.scopes.close(id);

  EXPECT_EQ(r.depth, 0);
  EXPECT_EQ(r.allocated_at_open, 1024);
  EXPECT_EQ(r.allocated_at_close, 4096);
  EXPECT_EQ(r.peak_allocated, 6144);
  EXPECT_EQ(r.peak_above_open(), 5120);
  EXPECT_EQ(r.self_peak_allocated, 6144);  // no children: self = total
  EXPECT_EQ(r.bytes_allocated, 4096 + 1024 + 2048);
  EXPECT_EQ(r.bytes_freed, 4096);
  EXPECT_EQ(r.allocations, 3);
  EXPECT_EQ(r.frees, 1);
  // One 2 MiB small-pool segment, reserved before the scope opened.
  EXPECT_EQ(r.reserved_at_open, 2 * kMiB);
  EXPECT_EQ(r.peak_reserved, 2 * kMiB);
  EXPECT_EQ(e.scopes.allocated(), e.allocated());
  for (Block* x : {before, c, d}) e.free(x);
}

TEST(ScopeTracker, SelfPeakExcludesTimeInsideChildScopes) {
  Engine e;
  const uint64_t outer = e.scopes.open();  // allocated 0
  Block* a = e.alloc(1000);                // 1024
  const uint64_t inner = e.scopes.open();
  Block* b = e.alloc(8192);                // 9216: only inside the child
  Block* kept = e.alloc(4096);             // 13312
  e.free(b);                               // 5120: the child leaves `kept` behind
  const ScopeResult in = e.scopes.close(inner);
  e.free(kept);                            // 1024
  Block* c = e.alloc(2048);                // 3072
  const ScopeResult out = e.scopes.close(outer);

  EXPECT_EQ(in.depth, 1);
  EXPECT_EQ(in.allocated_at_open, 1024);
  EXPECT_EQ(in.peak_allocated, 13312);
  EXPECT_EQ(in.peak_above_open(), 12288);
  EXPECT_EQ(in.bytes_allocated, 8192 + 4096);
  EXPECT_EQ(in.bytes_freed, 8192);

  EXPECT_EQ(out.peak_allocated, 13312);
  // The outer scope's own high point is the moment the child closed: what
  // the child left allocated is the outer scope's from then on.
  EXPECT_EQ(out.self_peak_allocated, 5120);
  EXPECT_EQ(out.bytes_allocated, 1024 + 8192 + 4096 + 2048);
  EXPECT_EQ(out.self_bytes_allocated, 1024 + 2048);
  EXPECT_EQ(out.bytes_freed, 8192 + 4096);
  EXPECT_EQ(out.self_bytes_freed, 4096);
  EXPECT_EQ(out.allocations, 4);
  EXPECT_EQ(out.self_allocations, 2);
  EXPECT_EQ(out.frees, 2);
  EXPECT_EQ(out.self_frees, 1);
  e.free(a);
  e.free(c);
}

TEST(ScopeTracker, ThreeDeepPeaksFoldOutwardAndSelfPeaksStayLocal) {
  Engine e;
  const uint64_t s1 = e.scopes.open();   // 0
  Block* a = e.alloc(10 * kKiB);          // 10 KiB
  const uint64_t s2 = e.scopes.open();
  Block* b = e.alloc(20 * kKiB);          // 30 KiB
  const uint64_t s3 = e.scopes.open();
  Block* c = e.alloc(40 * kKiB);          // 70 KiB: the global high point
  e.free(c);                              // 30 KiB
  const ScopeResult r3 = e.scopes.close(s3);
  e.free(b);                              // 10 KiB
  Block* d = e.alloc(5 * kKiB);           // 15 KiB
  const ScopeResult r2 = e.scopes.close(s2);
  Block* f = e.alloc(30 * kKiB);          // 45 KiB: s1's own high point
  e.free(f);
  const ScopeResult r1 = e.scopes.close(s1);

  EXPECT_EQ(r3.depth, 2);
  EXPECT_EQ(r3.peak_allocated, 70 * kKiB);
  EXPECT_EQ(r3.self_peak_allocated, 70 * kKiB);
  EXPECT_EQ(r3.allocated_at_close - r3.allocated_at_open, 0);

  EXPECT_EQ(r2.peak_allocated, 70 * kKiB);
  EXPECT_EQ(r2.self_peak_allocated, 30 * kKiB);  // at b, and again when s3 closed
  EXPECT_EQ(r2.peak_above_open(), 60 * kKiB);
  EXPECT_EQ(r2.self_peak_above_open(), 20 * kKiB);
  EXPECT_EQ(r2.bytes_allocated, (20 + 40 + 5) * kKiB);
  EXPECT_EQ(r2.self_bytes_allocated, (20 + 5) * kKiB);
  EXPECT_EQ(r2.bytes_freed, (40 + 20) * kKiB);
  EXPECT_EQ(r2.self_bytes_freed, 20 * kKiB);

  EXPECT_EQ(r1.peak_allocated, 70 * kKiB);
  EXPECT_EQ(r1.self_peak_allocated, 45 * kKiB);
  EXPECT_EQ(r1.bytes_allocated, (10 + 20 + 40 + 5 + 30) * kKiB);
  EXPECT_EQ(r1.self_bytes_allocated, (10 + 30) * kKiB);
  EXPECT_EQ(r1.allocations, 5);
  EXPECT_EQ(r1.self_allocations, 2);
  EXPECT_EQ(r1.frees, 3);
  EXPECT_EQ(r1.self_frees, 1);
  // Net change equals allocated minus freed at every level.
  for (const ScopeResult* r : {&r1, &r2, &r3})
    EXPECT_EQ(r->allocated_at_close - r->allocated_at_open, r->bytes_allocated - r->bytes_freed);
  e.free(a);
  e.free(d);
}

TEST(ScopeTracker, ParentPeakIsTheHigherSiblingNotTheSum) {
  Engine e;
  const uint64_t parent = e.scopes.open();
  const uint64_t first = e.scopes.open();
  Block* a = e.alloc(64 * kKiB);
  e.free(a);
  const ScopeResult r_first = e.scopes.close(first);
  const uint64_t second = e.scopes.open();
  Block* b = e.alloc(48 * kKiB);
  Block* c = e.alloc(32 * kKiB);  // 80 KiB
  e.free(b);
  e.free(c);
  const ScopeResult r_second = e.scopes.close(second);
  const ScopeResult r_parent = e.scopes.close(parent);

  EXPECT_EQ(r_first.peak_allocated, 64 * kKiB);
  EXPECT_EQ(r_second.peak_allocated, 80 * kKiB);
  EXPECT_EQ(r_first.depth, 1);
  EXPECT_EQ(r_second.depth, 1);
  EXPECT_EQ(r_parent.peak_allocated, 80 * kKiB);  // not 64 + 80
  EXPECT_EQ(r_parent.self_peak_allocated, 0);     // nothing happened while innermost
  EXPECT_EQ(r_parent.bytes_allocated, (64 + 48 + 32) * kKiB);
  EXPECT_EQ(r_parent.self_bytes_allocated, 0);
}

TEST(ScopeTracker, FreeingMemoryAllocatedBeforeTheScopeCountsAsFreedInside) {
  Engine e;
  Block* old = e.alloc(1 * kMiB);  // 1 MiB block from the small pool
  const uint64_t id = e.scopes.open();
  e.free(old);
  Block* x = e.alloc(512);
  const ScopeResult r = e.scopes.close(id);

  EXPECT_EQ(r.allocated_at_open, kMiB);
  EXPECT_EQ(r.allocated_at_close, 512);
  EXPECT_EQ(r.peak_allocated, kMiB);  // the level at open
  EXPECT_EQ(r.peak_above_open(), 0);
  EXPECT_EQ(r.bytes_freed, kMiB);
  EXPECT_EQ(r.bytes_allocated, 512);
  EXPECT_EQ(r.allocated_at_close - r.allocated_at_open, 512 - kMiB);
  e.free(x);
}

TEST(ScopeTracker, ReservedPeakSeesSegmentsReservedAndReleasedInside) {
  Engine e;
  const uint64_t id = e.scopes.open();
  Block* big = e.alloc(3 * kMiB);  // a 20 MiB large-pool segment
  e.free(big);
  e.engine.empty_cache();          // the segment goes back
  const ScopeResult r = e.scopes.close(id);

  EXPECT_EQ(r.reserved_at_open, 0);
  EXPECT_EQ(r.peak_reserved, 20 * kMiB);
  EXPECT_EQ(r.self_peak_reserved, 20 * kMiB);
  EXPECT_EQ(r.reserved_at_close, 0);
  EXPECT_EQ(r.peak_allocated, 3 * kMiB);
}

TEST(ScopeTracker, OutOfMemoryInsideAScopeLeavesItsCountsExact) {
  Engine e(64 * kMiB);
  const uint64_t id = e.scopes.open();
  Block* a = e.alloc(4 * kMiB);  // 20 MiB segment
  EXPECT_THROW(e.alloc(60 * kMiB), OutOfMemoryError);
  const ScopeResult r = e.scopes.close(id);

  EXPECT_EQ(r.allocations, 1);
  EXPECT_EQ(r.bytes_allocated, 4 * kMiB);
  EXPECT_EQ(r.peak_allocated, 4 * kMiB);
  EXPECT_EQ(r.allocated_at_close, e.allocated());
  EXPECT_EQ(r.reserved_at_close, e.reserved());
  e.free(a);
}

TEST(ScopeTracker, ClosingAScopeThatIsNotInnermostFailsAndChangesNothing) {
  Engine e;
  const uint64_t outer = e.scopes.open();
  const uint64_t inner = e.scopes.open();
  EXPECT_THROW(e.scopes.close(outer), ScopeError);
  EXPECT_EQ(e.scopes.depth(), 2u);
  EXPECT_THROW(e.scopes.close(inner + 1000), ScopeError);  // never opened
  EXPECT_EQ(e.scopes.depth(), 2u);
  e.scopes.close(inner);
  e.scopes.close(outer);
  EXPECT_THROW(e.scopes.close(outer), ScopeError);  // already closed, none open
  EXPECT_EQ(e.scopes.depth(), 0u);
}

TEST(ScopeTracker, ErrorMessageNamesTheScopesStillOpen) {
  Engine e;
  const uint64_t outer = e.scopes.open();
  const uint64_t inner = e.scopes.open();
  try {
    e.scopes.close(outer);
    FAIL() << "closing the outer scope first must throw";
  } catch (const ScopeError& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("not the innermost"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(inner)), std::string::npos) << msg;
  }
}

TEST(ScopeTracker, IdsAreNeverReused) {
  Engine e;
  const uint64_t a = e.scopes.open();
  e.scopes.close(a);
  const uint64_t b = e.scopes.open();
  EXPECT_NE(a, b);
  EXPECT_THROW(e.scopes.close(a), ScopeError);  // a stale id cannot close b
  e.scopes.close(b);
}

// Brute force: remembers `allocated` at every moment (open, event, close)
// together with the scopes open at that moment, and attributes every
// allocation and free to all open scopes (total) and the innermost (self).
class Oracle : public EngineObserver {
 public:
  void on_event(const EngineEvent& ev) override {
    const auto size = static_cast<int64_t>(ev.size);
    if (ev.kind == EventKind::kAlloc) {
      allocated_ += size;
      for (size_t i = 0; i < open_.size(); ++i) {
        Expected& x = expected_[open_[i]];
        x.bytes_allocated += size;
        ++x.allocations;
        if (i + 1 == open_.size()) { x.self_bytes_allocated += size; ++x.self_allocations; }
      }
    } else if (ev.kind == EventKind::kFreeRequested || ev.kind == EventKind::kFree) {
      allocated_ -= size;
      for (size_t i = 0; i < open_.size(); ++i) {
        Expected& x = expected_[open_[i]];
        x.bytes_freed += size;
        ++x.frees;
        if (i + 1 == open_.size()) { x.self_bytes_freed += size; ++x.self_frees; }
      }
    } else if (ev.kind == EventKind::kSegmentAlloc) {
      reserved_ += size;
    } else if (ev.kind == EventKind::kSegmentFree) {
      reserved_ -= size;
    }
    moment();
  }
  void opened(uint64_t id) {
    open_.push_back(id);
    expected_[id].allocated_at_open = allocated_;
    moment();
  }
  // The parent (if any) is innermost from this moment.
  void closed() {
    open_.pop_back();
    moment();
  }
  // Peaks from the full record of moments.
  ScopeResult expected(uint64_t id) const {
    ScopeResult r;
    const Expected& x = expected_.at(id);
    r.allocated_at_open = x.allocated_at_open;
    r.bytes_allocated = x.bytes_allocated;
    r.bytes_freed = x.bytes_freed;
    r.self_bytes_allocated = x.self_bytes_allocated;
    r.self_bytes_freed = x.self_bytes_freed;
    r.allocations = x.allocations;
    r.frees = x.frees;
    r.self_allocations = x.self_allocations;
    r.self_frees = x.self_frees;
    r.peak_allocated = r.self_peak_allocated = INT64_MIN;
    r.peak_reserved = r.self_peak_reserved = INT64_MIN;
    for (const Moment& m : moments_) {
      if (std::find(m.open.begin(), m.open.end(), id) == m.open.end()) continue;
      r.peak_allocated = std::max(r.peak_allocated, m.allocated);
      r.peak_reserved = std::max(r.peak_reserved, m.reserved);
      if (m.open.back() == id) {
        r.self_peak_allocated = std::max(r.self_peak_allocated, m.allocated);
        r.self_peak_reserved = std::max(r.self_peak_reserved, m.reserved);
      }
    }
    return r;
  }

 private:
  struct Moment {
    int64_t allocated, reserved;
    std::vector<uint64_t> open;  // innermost last
  };
  struct Expected {
    int64_t allocated_at_open = 0, bytes_allocated = 0, bytes_freed = 0;
    int64_t self_bytes_allocated = 0, self_bytes_freed = 0;
    int64_t allocations = 0, frees = 0, self_allocations = 0, self_frees = 0;
  };
  void moment() { moments_.push_back({allocated_, reserved_, open_}); }

  int64_t allocated_ = 0, reserved_ = 0;
  std::vector<uint64_t> open_;
  std::vector<Moment> moments_;
  std::map<uint64_t, Expected> expected_;
};

TEST(ScopeTracker, RandomNestingMatchesBruteForceOracleOnEveryField) {
  Engine e(size_t{1} << 30);
  Oracle oracle;
  e.engine.add_observer(&oracle);
  std::mt19937_64 rng(42);
  std::vector<Block*> live;
  std::vector<uint64_t> open;
  const size_t sizes[] = {1, 700, 1000, 4096, 100000, 1 << 20, (1 << 20) + 1, 3 << 20, 12 << 20};
  int checked = 0;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 8 && open.size() < 6) {
      open.push_back(e.scopes.open());
      oracle.opened(open.back());
    } else if (op < 16 && !open.empty()) {
      const uint64_t id = open.back();
      open.pop_back();
      const ScopeResult got = e.scopes.close(id);
      oracle.closed();
      const ScopeResult want = oracle.expected(id);
      ASSERT_EQ(got.allocated_at_open, want.allocated_at_open) << "step " << step;
      ASSERT_EQ(got.peak_allocated, want.peak_allocated) << "step " << step;
      ASSERT_EQ(got.self_peak_allocated, want.self_peak_allocated) << "step " << step;
      ASSERT_EQ(got.peak_reserved, want.peak_reserved) << "step " << step;
      ASSERT_EQ(got.self_peak_reserved, want.self_peak_reserved) << "step " << step;
      ASSERT_EQ(got.bytes_allocated, want.bytes_allocated);
      ASSERT_EQ(got.bytes_freed, want.bytes_freed);
      ASSERT_EQ(got.self_bytes_allocated, want.self_bytes_allocated);
      ASSERT_EQ(got.self_bytes_freed, want.self_bytes_freed);
      ASSERT_EQ(got.allocations, want.allocations);
      ASSERT_EQ(got.frees, want.frees);
      ASSERT_EQ(got.self_allocations, want.self_allocations);
      ASSERT_EQ(got.self_frees, want.self_frees);
      ASSERT_EQ(got.depth, static_cast<int64_t>(open.size()));
      ++checked;
    } else if (op < 55 || live.empty()) {
      live.push_back(e.alloc(sizes[rng() % std::size(sizes)]));
    } else if (op < 98) {
      const size_t i = rng() % live.size();
      e.free(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else {
      e.engine.empty_cache();
    }
    ASSERT_EQ(e.scopes.allocated(), e.allocated());
    ASSERT_EQ(e.scopes.reserved(), e.reserved());
  }
  EXPECT_GT(checked, 1000);
  for (Block* b : live) e.free(b);
  e.engine.remove_observer(&oracle);
}

}  // namespace
}  // namespace cachealloc
