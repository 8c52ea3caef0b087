// FreeIndex against std::set: the same random operations on both, every
// result compared, and the tree's own invariant checker run every few
// thousand operations. The index grows into tens of thousands of entries
// (several levels) and shrinks back to empty again and again, under key
// mixes with few streams (ties on stream and size, decided by address),
// many streams, and crowded keys (inserts that find their key present).
// A second configuration with tiny nodes (4 entries, 4 children) runs the
// same code through deep trees and constant splits and merges.
// The seed is fixed and printed; CACHEALLOC_SEED=<n> replays another one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <random>
#include <set>
#include <tuple>

#include "allocator/index/free_index.h"
#include "tests/cpp/test_env.h"

namespace cachealloc {
namespace {

using TinyIndex = BasicFreeIndex<4, 4>;
static_assert(std::bidirectional_iterator<FreeIndex::iterator>);

// The reference order, written out from native's rule (BlockComparatorSize
// in c10/cuda/CUDACachingAllocator.cpp: stream, then size, then address),
// not from the index's own sorts_before.
bool native_before(const FreeEntry& a, const FreeEntry& b) {
  return std::tie(a.stream, a.size, a.address) < std::tie(b.stream, b.size, b.address);
}
struct ByKey {
  bool operator()(const FreeEntry& a, const FreeEntry& b) const { return native_before(a, b); }
};
using Reference = std::set<FreeEntry, ByKey>;

bool same_entry(const FreeEntry& a, const FreeEntry& b) {
  return a.stream == b.stream && a.size == b.size && a.address == b.address && a.block == b.block;
}

uint64_t BaseSeed() { return env_u64("CACHEALLOC_SEED", 20250612); }

// Keys are drawn from streams x sizes x addresses (sizes and addresses in
// 512-byte steps); one key in 64 takes an extreme value in one field.
struct KeyMix {
  uint64_t streams, sizes, addresses;
};
constexpr KeyMix kFewStreams{2, 6, 1u << 20};
constexpr KeyMix kManyStreams{4096, 64, 1u << 16};
constexpr KeyMix kCrowded{3, 4, 1u << 12};  // 49,152 keys in all

class Keys {
 public:
  Keys(const KeyMix& mix, uint64_t seed) : mix_(mix), rng_(seed) {}
  uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  // A fake block pointer, unique per call; never dereferenced.
  Block* block() { return reinterpret_cast<Block*>(++blocks_ * 64); }
  FreeEntry any() {
    FreeEntry e{pick(mix_.streams) * 0x1000 + 7, 512 * (1 + pick(mix_.sizes)),
                512 * pick(mix_.addresses), block()};
    switch (pick(64)) {
      case 0: e.stream = UINTPTR_MAX; break;
      case 1: e.size = SIZE_MAX; break;
      case 2: e.address = UINTPTR_MAX; break;
      default: break;
    }
    return e;
  }

 private:
  KeyMix mix_;
  std::mt19937_64 rng_;
  uint64_t blocks_ = 0;
};

template <class Index>
class Differential {
 public:
  Differential(const KeyMix& mix, uint64_t seed, size_t peak, int check_every)
      : keys_(mix, seed), peak_(peak), check_every_(check_every) {}

  // Runs `ops` random operations; returns the grow-to-peak-and-empty cycles.
  int run(int ops) {
    for (op_ = 0; op_ < ops; ++op_) {
      if (growing_ && ref_.size() >= peak_) growing_ = false;
      if (!growing_ && ref_.empty()) {
        growing_ = true;
        ++cycles_;
      }
      step();
      if (::testing::Test::HasFatalFailure()) return cycles_;
      check_size();
      if (op_ % check_every_ == 0 || ref_.empty() || ref_.size() == peak_) check_whole();
      if (::testing::Test::HasFatalFailure()) return cycles_;
    }
    check_whole();
    return cycles_;
  }

 private:
  using It = typename Index::iterator;
  using RefIt = typename Reference::iterator;

  void check_size() {
    ASSERT_EQ(index_.size(), ref_.size()) << where();
    ASSERT_EQ(index_.empty(), ref_.empty()) << where();
  }
  std::string where() const { return "at operation " + std::to_string(op_); }

  void step() {
    // Growing: about +37 entries per 100 operations; shrinking: about -32
    // (half the erases by key miss). The other 45 look up or re-key.
    const uint64_t r = keys_.pick(100);
    const uint64_t inserts = growing_ ? 45 : 5;
    const uint64_t erases = growing_ ? 5 : 25;  // each kind
    if (r < inserts) return op_insert();
    if (r < inserts + erases) return op_erase_key();
    if (r < inserts + 2 * erases) return op_erase_iterator();
    switch (r % 4) {
      case 0: return op_lower_bound();
      case 1: return op_find();
      default: return op_rekey();
    }
  }

  // `got` and `want` name the same entry, or both the end.
  void expect_same(It got, RefIt want) {
    if (want == ref_.end()) {
      ASSERT_TRUE(Index::is_end(got)) << where();
      ASSERT_TRUE(got == index_.end()) << where();
    } else {
      ASSERT_FALSE(Index::is_end(got)) << where();
      ASSERT_TRUE(same_entry(*got, *want)) << where();
    }
  }
  // A present entry (the reference is not empty).
  RefIt pick_present() {
    auto it = ref_.lower_bound(keys_.any());
    return it == ref_.end() ? std::prev(it) : it;
  }
  FreeEntry any_or_present() { return ref_.empty() || keys_.pick(2) ? keys_.any() : *pick_present(); }

  void op_insert() {
    const FreeEntry e = keys_.any();
    const auto [it, inserted] = index_.insert(e);
    const auto [want, want_inserted] = ref_.insert(e);
    ASSERT_EQ(inserted, want_inserted) << where();
    expect_same(it, want);
  }
  void op_erase_key() {
    const FreeEntry key = any_or_present();
    ASSERT_EQ(index_.erase(key), ref_.erase(key)) << where();
  }
  void op_erase_iterator() {
    if (ref_.empty()) return;
    const RefIt want = pick_present();
    const It it = index_.find(*want);
    expect_same(it, want);
    const It after = index_.erase(it);
    expect_same(after, ref_.erase(want));
  }
  // lower_bound, then up to 20 steps each way from it (--end() included).
  void op_lower_bound() {
    const FreeEntry key = keys_.any();
    It it = index_.lower_bound(key);
    RefIt want = ref_.lower_bound(key);
    expect_same(it, want);
    It fwd = it;
    RefIt want_fwd = want;
    for (int i = 0; i < 20 && want_fwd != ref_.end(); ++i) {
      ++fwd;
      ++want_fwd;
      expect_same(fwd, want_fwd);
    }
    for (int i = 0; i < 20 && want != ref_.begin(); ++i) {
      --it;
      --want;
      expect_same(it, want);
    }
    if (want == ref_.begin()) {
      ASSERT_TRUE(it == index_.begin()) << where();
    }
  }
  void op_find() {
    const FreeEntry key = any_or_present();
    expect_same(index_.find(key), ref_.find(key));
    ASSERT_EQ(index_.contains(key), ref_.count(key) == 1) << where();
  }
  // Re-keys a present entry to a key that lands just inside or just outside
  // its neighbours (at leaf edges this moves separators), near its old key,
  // onto a neighbour's key, or anywhere.
  void op_rekey() {
    if (ref_.empty()) return;
    const RefIt want = pick_present();
    const It it = index_.find(*want);
    expect_same(it, want);
    const FreeEntry* before = want == ref_.begin() ? nullptr : &*std::prev(want);
    const FreeEntry* after = std::next(want) == ref_.end() ? nullptr : &*std::next(want);
    FreeEntry e = *want;
    switch (keys_.pick(7)) {
      case 0: if (before) { e = *before; ++e.address; } break;
      case 1: if (after) { e = *after; --e.address; } break;
      case 2: e.address += 512 * keys_.pick(64) - 512 * 32; break;
      case 3: e.size += keys_.pick(2) ? 512 : -512; break;
      case 4: if (before) e = *before; break;
      case 5: if (after) e = *after; break;
      default: e = keys_.any(); break;
    }
    e.block = keys_.block();
    const bool fits = (!before || native_before(*before, e)) && (!after || native_before(e, *after));
    ASSERT_EQ(index_.rekey_in_place(it, e), fits) << where();
    if (fits) {
      ref_.erase(want);
      ref_.insert(e);
    }
    ASSERT_TRUE(same_entry(*it, fits ? e : *want)) << where();
  }

  // Invariant checker, then the whole order both ways.
  void check_whole() {
    ASSERT_EQ(index_.check_invariants(), "") << where();
    ASSERT_EQ(index_.begin() == index_.end(), ref_.empty()) << where();
    It it = index_.begin();
    for (const FreeEntry& want : ref_) {
      ASSERT_TRUE(same_entry(*it, want)) << where();
      ++it;
    }
    ASSERT_TRUE(it == index_.end()) << where();
    for (auto want = ref_.rbegin(); want != ref_.rend(); ++want)
      ASSERT_TRUE(same_entry(*--it, *want)) << where();
    ASSERT_TRUE(it == index_.begin()) << where();
  }

  Index index_;
  Reference ref_;
  Keys keys_;
  const size_t peak_;
  const int check_every_;
  int op_ = 0;
  bool growing_ = true;
  int cycles_ = 0;
};

template <class Index>
void RunDifferential(const KeyMix& mix, uint64_t salt, size_t peak, int ops, int check_every) {
  const uint64_t seed = BaseSeed() + salt;
  std::cout << "seed " << BaseSeed() << " (+" << salt << ")\n";
  Differential<Index> test(mix, seed, peak, check_every);
  const int cycles = test.run(ops);
  EXPECT_GE(cycles, 2) << "the index should have grown to " << peak << " and emptied twice";
}

// 3 x 500,000 operations on the allocator's configuration.
TEST(FreeIndex, MatchesStdSetWithFewStreams) {
  RunDifferential<FreeIndex>(kFewStreams, 1, 30'000, 500'000, 2'000);
}
TEST(FreeIndex, MatchesStdSetWithManyStreams) {
  RunDifferential<FreeIndex>(kManyStreams, 2, 30'000, 500'000, 2'000);
}
TEST(FreeIndex, MatchesStdSetWithCrowdedKeys) {
  RunDifferential<FreeIndex>(kCrowded, 3, 20'000, 500'000, 2'000);
}
// Tiny nodes: 3,000 entries make a tree of 6 to 12 levels.
TEST(FreeIndex, TinyNodesMatchStdSetWithFewStreams) {
  RunDifferential<TinyIndex>(kFewStreams, 4, 3'000, 200'000, 100);
}
TEST(FreeIndex, TinyNodesMatchStdSetWithManyStreams) {
  RunDifferential<TinyIndex>(kManyStreams, 5, 3'000, 200'000, 100);
}

// An index that swings between k and k + 1 entries takes no node from the
// heap after the first swing: the root leaf stays, a split leaf keeps room.
template <class Index>
void ExpectSwingsReuseNodes(size_t k) {
  Index index;
  Keys keys(kFewStreams, BaseSeed());
  while (index.size() < k) index.insert(keys.any());
  FreeEntry swing = keys.any();
  while (index.contains(swing)) swing = keys.any();
  index.insert(swing);
  index.erase(swing);
  const size_t allocations = index.node_allocations();
  for (int i = 0; i < 10'000; ++i) {
    ASSERT_TRUE(index.insert(swing).second);
    ASSERT_EQ(index.erase(swing), 1u);
  }
  EXPECT_EQ(index.node_allocations(), allocations) << "k = " << k;
  EXPECT_EQ(index.check_invariants(), "");
}
TEST(FreeIndex, SwingingByOneEntryTakesNoNodeFromTheHeap) {
  for (size_t k : {0, 1, 15, 16, 17, 1000, 30'000}) ExpectSwingsReuseNodes<FreeIndex>(k);
  for (size_t k : {0, 1, 3, 4, 5, 1000}) ExpectSwingsReuseNodes<TinyIndex>(k);
}

// An index that fills to a few nodes and empties again, over and over, takes
// its nodes from the spares kept when it emptied. The tree a fill builds
// depends on the keys drawn (round 0's may be smaller than a later one's),
// so the check is a bound, not "no allocation after round 0": a tree of
// these sizes never needs more leaves or inner nodes than the spares kept
// (plus the root leaf), whereas dropping the spares costs nodes every round.
template <class Index>
void ExpectRefillsReuseSpares(size_t entries) {
  Index index;
  Keys keys(kManyStreams, BaseSeed());
  size_t after_first_round = 0;
  for (int round = 0; round < 1'000; ++round) {
    while (index.size() < entries) index.insert(keys.any());
    while (!index.empty()) index.erase(index.begin());
    if (round == 0) after_first_round = index.node_allocations();
  }
  EXPECT_GT(after_first_round, 1u) << "the index never outgrew its root leaf";
  EXPECT_LE(index.node_allocations(), size_t{1} + 2 * Index::kSpareNodes)
      << entries << " entries";
}
TEST(FreeIndex, RefillingAfterEmptyingReusesSpareNodes) {
  ExpectRefillsReuseSpares<FreeIndex>(30);  // <= 3 leaves under one root
  ExpectRefillsReuseSpares<TinyIndex>(8);   // <= 4 leaves, <= 3 inner nodes
}

// Every entry in turn is re-keyed to just above its predecessor, then (walking
// down) to just below its successor: at each leaf's first and last entry the
// new key crosses the separator fencing that edge, which must move with it.
template <class Index>
void ExpectEdgeRekeysKeepSearchExact() {
  Index index;
  constexpr uintptr_t kEntries = 5'000;
  for (uintptr_t i = 0; i < kEntries; ++i) index.insert(FreeEntry{7, 512, 1'000'000 * i, nullptr});
  auto expect_found = [&] {
    ASSERT_EQ(index.check_invariants(), "");
    for (auto it = index.begin(); it != index.end(); ++it) {
      ASSERT_TRUE(index.find(*it) == it);
      ASSERT_TRUE(index.lower_bound(*it) == it);
    }
  };
  for (auto it = std::next(index.begin()); it != index.end(); ++it) {
    FreeEntry e = *std::prev(it);
    ++e.address;
    ASSERT_TRUE(index.rekey_in_place(it, e));
  }
  expect_found();
  for (auto it = std::prev(index.end(), 2);; --it) {
    FreeEntry e = *std::next(it);
    --e.address;
    ASSERT_TRUE(index.rekey_in_place(it, e));
    if (it == index.begin()) break;
  }
  expect_found();
  EXPECT_EQ(index.size(), kEntries);
}
TEST(FreeIndex, RekeysAcrossLeafEdgesKeepSearchExact) {
  ExpectEdgeRekeysKeepSearchExact<FreeIndex>();
  ExpectEdgeRekeysKeepSearchExact<TinyIndex>();
}

}  // namespace
}  // namespace cachealloc
