// The free-block index on its own: the operations of a cache-hit pair on
// indexes of 1 to 1,000,000 entries, for several node sizes of FreeIndex
// and for absl::btree_set (what BlockPool used before FreeIndex).
//
//   BM_HitPair<Index>/entries:N     lower_bound(stream, size), then two
//       re-keys of the found entry that keep its rank (there and back), as
//       alloc (split) + free (merge) do; absl re-keys as BlockPool did, by
//       checking both neighbours and writing the entry in place
//   BM_InsertErase<Index>/entries:N insert a new key, erase it again (an
//       index swinging between N and N + 1 entries)
//
// Keys: 4 streams, sizes of 512 B to 2 MiB, random addresses; the probed
// entries cycle through 4,096 random ones, so large indexes miss the caches
// as a busy allocator would. Results and the choice of node size:
// docs/free_index.md.
#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

#include "absl/container/btree_set.h"
#include "allocator/index/free_index.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"

namespace cachealloc {
namespace {

constexpr size_t kProbes = 4096;

// absl::btree_set behind the same three calls the benchmark makes.
struct AbslIndex {
  struct Less {
    bool operator()(const FreeEntry& a, const FreeEntry& b) const { return sorts_before(a, b); }
  };
  using Set = absl::btree_set<FreeEntry, Less>;
  using iterator = Set::iterator;
  Set set;
  std::pair<iterator, bool> insert(const FreeEntry& e) { return set.insert(e); }
  size_t erase(const FreeEntry& e) { return set.erase(e); }
  iterator lower_bound(const FreeEntry& e) { return set.lower_bound(e); }
  size_t size() const { return set.size(); }
  bool rekey_in_place(iterator it, const FreeEntry& e) {
    if (std::next(it) != set.end() && !sorts_before(e, *std::next(it))) return false;
    if (it != set.begin() && !sorts_before(*std::prev(it), e)) return false;
    const_cast<FreeEntry&>(*it) = e;  // order unchanged: checked above
    return true;
  }
};

FreeEntry random_entry(std::mt19937_64& rng) {
  return FreeEntry{rng() % 4, 512 * (1 + rng() % 4096), 512 * (rng() >> 20), nullptr};
}

// An index of `n` random entries and kProbes of its entries, shuffled.
template <class Index>
void fill(Index& index, size_t n, std::vector<FreeEntry>& probes, std::mt19937_64& rng) {
  std::vector<FreeEntry> present;
  while (index.size() < n) {
    const FreeEntry e = random_entry(rng);
    if (index.insert(e).second) present.push_back(e);
  }
  for (size_t i = 0; i < kProbes; ++i) probes.push_back(present[rng() % present.size()]);
}

template <class Index>
void BM_HitPair(benchmark::State& state) {
  std::mt19937_64 rng(7);
  Index index;
  std::vector<FreeEntry> probes;
  fill(index, static_cast<size_t>(state.range(0)), probes, rng);
  size_t i = 0, refused = 0;
  for (auto _ : state) {
    const FreeEntry& p = probes[i++ % kProbes];
    auto it = index.lower_bound(FreeEntry{p.stream, p.size, 0, nullptr});
    FreeEntry e = *it;  // p, or a same-sized entry at a lower address
    ++e.address;        // addresses are 512 apart: the rank is kept
    refused += !index.rekey_in_place(it, e);
    --e.address;
    refused += !index.rekey_in_place(it, e);
  }
  if (refused) state.SkipWithError("a rank-keeping re-key was refused");
  state.SetItemsProcessed(state.iterations());
}

template <class Index>
void BM_InsertErase(benchmark::State& state) {
  std::mt19937_64 rng(7);
  Index index;
  std::vector<FreeEntry> probes;
  fill(index, static_cast<size_t>(state.range(0)), probes, rng);
  for (FreeEntry& p : probes) p.address += 256;  // new keys, not in the index
  size_t i = 0;
  for (auto _ : state) {
    const FreeEntry& p = probes[i++ % kProbes];
    benchmark::DoNotOptimize(index.insert(p));
    benchmark::DoNotOptimize(index.erase(p));
  }
  state.SetItemsProcessed(state.iterations());
}

void Entries(benchmark::internal::Benchmark* b) {
  b->ArgName("entries");
  for (int64_t n : {1, 10, 1'000, 100'000, 1'000'000}) b->Arg(n);
}

using Leaf8 = BasicFreeIndex<8, 16>;
using Leaf12 = BasicFreeIndex<12, 16>;
using Leaf32 = BasicFreeIndex<32, 16>;
using Fanout32 = BasicFreeIndex<16, 32>;
BENCHMARK(BM_HitPair<FreeIndex>)->Apply(Entries);
BENCHMARK(BM_HitPair<Leaf8>)->Apply(Entries);
BENCHMARK(BM_HitPair<Leaf12>)->Apply(Entries);
BENCHMARK(BM_HitPair<Leaf32>)->Apply(Entries);
BENCHMARK(BM_HitPair<Fanout32>)->Apply(Entries);
BENCHMARK(BM_HitPair<AbslIndex>)->Apply(Entries);
BENCHMARK(BM_InsertErase<FreeIndex>)->Apply(Entries);
BENCHMARK(BM_InsertErase<Leaf8>)->Apply(Entries);
BENCHMARK(BM_InsertErase<Leaf12>)->Apply(Entries);
BENCHMARK(BM_InsertErase<Leaf32>)->Apply(Entries);
BENCHMARK(BM_InsertErase<Fanout32>)->Apply(Entries);
BENCHMARK(BM_InsertErase<AbslIndex>)->Apply(Entries);

}  // namespace
}  // namespace cachealloc

CACHEALLOC_BENCHMARK_MAIN();
