// Randomized test of the engine: over a million mixed operations (malloc of
// 1 B to 1 GiB on several streams, frees in random order, record_stream with
// held events, empty_cache, OOM under a limit; in one configuration also
// memory pools: routes opened and closed, pools made and released, with
// no_split and use_on_oom, frees deferred while a route is open, and pool
// checkpoints saved and restored), checking after EVERY
// operation that
//   - check_invariants() holds (blocks tile segments, free neighbours merged,
//     pool index consistent), and
//   - every current statistic equals what the segment list implies, per pool
//     and in aggregate, with peak >= current and allocated - freed == current;
//   - no block is handed out over memory still in use on another stream;
//   - a malloc lands in the pool of the newest route that accepts its stream
//     (or, with none, in the default pools or a use_on_oom pool), and every
//     pool's use count is what the calls made it.
// The seed is fixed and printed; CACHEALLOC_SEED=<n> replays another one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"
#include "tests/cpp/test_env.h"

namespace cachealloc::testing {
namespace {

constexpr uint64_t kDefaultSeed = 20250611;
constexpr size_t kMaxLive = 300;        // keeps per-operation checks cheap
constexpr int kOpsPerConfig = 250'000;  // four configurations: 1,000,000 ops
constexpr size_t kSizeHistory = 32;     // sizes remembered for exact repeats

uint64_t BaseSeed() { return env_u64("CACHEALLOC_SEED", kDefaultSeed); }

struct Scenario {
  const char* conf;     // PYTORCH_CUDA_ALLOC_CONF text
  size_t capacity;      // simulated device bytes
  size_t limit;         // memory limit in bytes, 0 = none
  int streams;          // distinct streams used (at most 32: masks in Live)
  uint64_t seed_salt;   // keeps the configurations' sequences apart
  bool quiet_releases;  // GC or max_split_size must free without a full sync
  bool pools = false;   // also memory pool operations (PyTorch's MemPool)
  // The placement policy (allocator/policy/policy_registry.h) and the
  // operations its runs take (policies are checked with fewer).
  const char* policy = "native";
  int ops = 250'000;
};

// The stat families of DeviceStats, in its order.
enum Family { kAllocation, kSegment, kActive, kInactiveSplit, kAllocatedBytes, kReservedBytes,
              kActiveBytes, kInactiveSplitBytes, kRequestedBytes, kFamilies };

// The stats every current value must equal, recomputed from the segments.
struct Expected {
  std::array<std::array<int64_t, 3>, kFamilies> family{};  // [Family][StatPool]
  int64_t oversize_allocations = 0;
  int64_t oversize_segments = 0;
};

Expected Recompute(const std::vector<SegmentView>& segments, size_t max_split) {
  Expected x;
  for (const SegmentView& s : segments) {
    const size_t pool = s.is_small ? kSmallPool : kLargePool;
    auto add = [&](int family, size_t amount) {
      x.family[family][pool] += static_cast<int64_t>(amount);
      x.family[family][kAllPools] += static_cast<int64_t>(amount);
    };
    // Native's "inactive split": a free block of a segment cut into pieces.
    // Native leaves expandable segments (mapped ranges) out of the segment
    // and inactive split stats: a mapping is no segment of its own.
    const bool split = s.blocks.size() > 1 && !s.is_expandable;
    size_t bytes = 0;
    for (const Block* b : s.blocks) {
      bytes += b->size;
      if (b->allocated) {
        add(kAllocation, 1);
        add(kAllocatedBytes, b->size);
        if (b->size >= max_split) ++x.oversize_allocations;
      }
      if (!b->is_free()) {  // allocated, or freed but awaiting stream events
        add(kActive, 1);
        add(kActiveBytes, b->size);
        // Requested bytes leave the stat only when the free completes.
        add(kRequestedBytes, b->requested_size);
      } else if (split) {
        add(kInactiveSplit, 1);
        add(kInactiveSplitBytes, b->size);
      }
    }
    add(kReservedBytes, bytes);
    if (s.is_expandable) continue;
    add(kSegment, 1);
    if (bytes >= max_split) ++x.oversize_segments;
  }
  return x;
}

// Empty when the collector agrees with `x`; otherwise what differs.
// `pages`: memory is mapped in pages (expandable segments).
std::string CompareStats(const DeviceStats& s, const Expected& x, bool pages) {
  static constexpr const char* kNames[kFamilies] = {
      "allocation", "segment", "active", "inactive_split", "allocated_bytes",
      "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"};
  const StatArray* families[kFamilies] = {&s.allocation, &s.segment, &s.active,
                                 &s.inactive_split, &s.allocated_bytes, &s.reserved_bytes,
                                 &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes};
  static constexpr const char* kPools[] = {"all", "small_pool", "large_pool"};
  std::ostringstream out;
  auto check = [&](const std::string& name, const Stat& st, int64_t want) {
    if (st.current != want) out << name << ".current=" << st.current << " want " << want << "; ";
    if (st.peak < st.current) out << name << ".peak " << st.peak << " < current; ";
    if (st.allocated - st.freed != st.current) out << name << " allocated-freed != current; ";
  };
  for (size_t f = 0; f < kFamilies; ++f)
    for (size_t p = 0; p < 3; ++p)
      check(std::string(kNames[f]) + "." + kPools[p], (*families[f])[p], x.family[f][p]);
  check("oversize_allocations", s.oversize_allocations, x.oversize_allocations);
  check("oversize_segments", s.oversize_segments, x.oversize_segments);
  // (Mappings join and split ranges: only whole segments count one each.)
  if (!pages && s.num_device_alloc - s.num_device_free != x.family[kSegment][kAllPools])
    out << "num_device_alloc - num_device_free != segments; ";
  return out.str();
}

class RandomRun {
 public:
  RandomRun(const Scenario& sc, uint64_t seed)
      : sc_(sc), h_(sc.conf, sc.capacity, sc.policy), rng_(seed) {
    if (sc.limit) h_.engine.set_memory_limit(sc.limit);
    // Boundary sizes of the rules, so exact repeats exercise them often.
    for (size_t s : {size_t{1}, size_t{512}, size_t{513}, kMiB, kMiB + 1, 10 * kMiB - 1,
                     10 * kMiB, 20 * kMiB, 64 * kMiB, 64 * kMiB + 1, 84 * kMiB})
      sizes_.push_back(s);
  }

  // Runs `ops` operations; returns how many ran (all, unless a check failed).
  int Run(int ops) {
    for (int i = 0; i < ops; ++i) {
      const std::string what = Step();
      const std::string err = Check();
      if (!err.empty()) {
        ADD_FAILURE() << "operation " << i << " (" << what << "): " << err;
        return i;
      }
    }
    return ops;
  }

  int64_t ooms() const { return ooms_; }
  int64_t pending_frees() const { return pending_frees_; }
  int64_t empty_caches() const { return empty_caches_; }
  // Mallocs that returned segments without a full sync: GC or
  // release_available_cached_blocks at work.
  int64_t quiet_releases() const { return quiet_releases_; }
  DeviceStats stats() const { return h_.stats(); }
  int64_t pool_ops() const { return pool_ops_; }
  int64_t routed_mallocs() const { return routed_mallocs_; }
  // Frees of blocks used on other streams while a route was open (deferred).
  int64_t deferred_frees() const { return deferred_frees_; }
  int64_t restores() const { return restores_; }
  int64_t refused_restores() const { return refused_restores_; }

 private:
  struct Live {
    Block* block;
    size_t requested;
    StreamId stream;
    // record_stream on another stream, by stream index (stream / 0x100):
    // made while no route was open, and while one was. A block freed while
    // a route is open forgets, as native, every stream also recorded
    // during a route (that work counts as captured into a CUDA graph).
    uint32_t used_outside_routes = 0;
    uint32_t used_during_routes = 0;
  };
  // A pool the run holds (made and not yet released by it).
  struct HeldPool {
    PoolId id;
    int uses = 1;         // what pool_use_count must say
    bool routed = false;  // a route is open; then `route_stream` is routed
    StreamId route_stream = 0;
    bool every_stream = false;  // the route accepts every stream
    uint64_t opened = 0;  // order of route opening (newest wins)
  };

  StreamId RandomStream() {
    return static_cast<StreamId>(std::uniform_int_distribution<int>(0, sc_.streams - 1)(rng_)) *
           0x100;
  }
  size_t RandomSize() {
    if (std::uniform_int_distribution<int>(0, 3)(rng_) == 0)
      return sizes_[std::uniform_int_distribution<size_t>(0, sizes_.size() - 1)(rng_)];
    // Log-uniform over [1 B, 16 MiB), and 1 time in 20 over [16 MiB, 1 GiB]:
    // few enough huge blocks that hundreds of live ones fit a few GiB.
    const bool huge = std::uniform_int_distribution<int>(0, 19)(rng_) == 0;
    const double e = huge ? std::uniform_real_distribution<double>(24.0, 30.0)(rng_)
                          : std::uniform_real_distribution<double>(0.0, 24.0)(rng_);
    const size_t s = std::clamp<size_t>(static_cast<size_t>(std::exp2(e)), 1, kGiB);
    sizes_[next_size_++ % kSizeHistory] = s;
    if (sizes_.size() < kSizeHistory) sizes_.push_back(s);
    return s;
  }

  std::string Step() {
    const int r = std::uniform_int_distribution<int>(0, 999)(rng_);
    // Lean towards frees when the cache holds most of what it may hold, so
    // OOMs stay occasional rather than constant.
    const size_t budget = sc_.limit ? sc_.limit : sc_.capacity;
    const int malloc_share = h_.engine.reserved_bytes() > budget / 4 * 3 ? 350 : 480;
    if (live_.empty() || (live_.size() < kMaxLive && r < malloc_share)) return Malloc();
    if (r < 900) return Free();
    if (r < 960) return RecordStream();
    if (sc_.pools && r < 975) return PoolOp();
    if (sc_.pools && r < 980) return CheckpointOp();
    if (r < 995) return ToggleEvents();
    ++empty_caches_;
    const int64_t syncs = h_.stats().num_sync_all_streams;
    h_.engine.empty_cache();
    // It synchronizes every outstanding event, unless a route is open.
    if (h_.stats().num_sync_all_streams != syncs) pending_.clear();
    return "empty_cache";
  }

  std::string Malloc() {
    const size_t size = RandomSize();
    const StreamId stream = RandomStream();
    const int64_t syncs = h_.stats().num_sync_all_streams;
    const int64_t device_frees = h_.stats().num_device_free;
    std::ostringstream what;
    what << "malloc(" << size << ", stream " << stream << ")";
    Block* b = nullptr;
    try {
      b = h_.engine.malloc(size, stream);
    } catch (const OutOfMemoryError&) {
      ++ooms_;
    }
    // A full sync (OOM path) completes every event: that memory is free now.
    if (h_.stats().num_sync_all_streams != syncs) pending_.clear();
    else if (h_.stats().num_device_free != device_frees) ++quiet_releases_;
    const HeldPool* route = RouteFor(stream);
    if (!b) {
      // Unless a route is open (native then neither syncs nor empties the
      // cache), the OOM path synced every stream and returned every whole
      // cached segment of the default pools (and of freeable pools) before
      // giving up: no pending free or whole free default segment is left.
      if (!AnyRoute())
        for (const SegmentView& s : h_.engine.segments())
          for (const Block* blk : s.blocks)
            if (!blk->allocated && (!blk->is_free() ||
                                    (s.blocks.size() == 1 && s.pool_id.is_default())))
              error_ = "OOM left a pending free or a whole free segment";
      return what.str() + " -> OOM";
    }
    const PrivatePool* owner = b->pool->owner();
    if (route) {
      ++routed_mallocs_;
      if (!owner || owner->id != route->id) error_ = "a routed malloc missed its pool";
    } else if (owner && !UseOnOom(owner->id)) {
      error_ = "an unrouted malloc landed in a pool that is not use_on_oom";
    }
    if (b->size < size || b->size % 512 != 0 || b->stream != stream || !b->allocated ||
        b->requested_size != size)
      error_ = "bad block fields";
    for (const auto& [start, end, pool] : pending_)
      if (b->address < end && start < b->address + b->size)
        error_ = "block overlaps memory still in use on another stream";
    live_.push_back({b, size, stream});
    return what.str();
  }

  std::string Free() {
    const size_t i = std::uniform_int_distribution<size_t>(0, live_.size() - 1)(rng_);
    const Live l = live_[i];
    live_[i] = live_.back();
    live_.pop_back();
    const uint32_t waits_for = AnyRoute() ? l.used_outside_routes & ~l.used_during_routes
                                          : l.used_outside_routes | l.used_during_routes;
    if (AnyRoute() && (l.used_outside_routes | l.used_during_routes)) ++deferred_frees_;
    if (waits_for != 0 && events_held_) {
      const PrivatePool* owner = l.block->pool->owner();
      pending_.push_back({l.block->address, l.block->address + l.block->size,
                          owner ? owner->id : PoolId{}});
      ++pending_frees_;
    }
    h_.engine.free(l.block);
    return "free(" + std::to_string(l.requested) + ")";
  }

  // Memory pool calls as PyTorch makes them: MemPool() (sometimes
  // no_split or use_on_oom), use_mem_pool's enter (route + use) and exit
  // (end route + release), and ~MemPool (use_on_oom off, release, empty the
  // pool's cache). Routes accept one stream or every stream.
  std::string PoolOp() {
    ++pool_ops_;
    const int r = std::uniform_int_distribution<int>(0, 3)(rng_);
    if (r == 0 || held_.empty()) {
      if (held_.size() >= 4) return "pool: none (4 held)";
      const PoolId id{0, next_pool_++};
      h_.engine.create_or_incref_pool(id);
      HeldPool p;
      p.id = id;
      const int flavour = std::uniform_int_distribution<int>(0, 3)(rng_);
      if (flavour == 1) h_.engine.set_no_split(id);
      if (flavour == 2) {
        h_.engine.set_use_on_oom(id, true);
        use_on_oom_.push_back(id);
      }
      held_.push_back(p);
      return "MemPool" + id.to_string();
    }
    HeldPool& p = held_[std::uniform_int_distribution<size_t>(0, held_.size() - 1)(rng_)];
    if (r == 1 && !p.routed) {
      p.every_stream = std::uniform_int_distribution<int>(0, 2)(rng_) == 0;
      p.route_stream = RandomStream();
      const bool every = p.every_stream;
      const StreamId only = p.route_stream;
      h_.engine.begin_allocate_to_pool(p.id, [every, only](StreamId s) {
        return every || s == only;
      });
      p.routed = true;
      p.opened = ++routes_opened_;
      ++p.uses;
      return "use_mem_pool" + p.id.to_string() + " enter";
    }
    if (p.routed) {
      h_.engine.end_allocate_to_pool(p.id);
      h_.engine.release_pool(p.id);
      p.routed = false;
      --p.uses;
      return "use_mem_pool" + p.id.to_string() + " exit";
    }
    // ~MemPool of a pool with no open route: it becomes freeable.
    const PoolId id = p.id;
    h_.engine.set_use_on_oom(id, false);
    std::erase(use_on_oom_, id);
    h_.engine.release_pool(id);
    const int64_t syncs = h_.stats().num_sync_all_streams;
    h_.engine.empty_cache(nullptr, id);
    if (h_.stats().num_sync_all_streams != syncs) ForgetPendingOf(id);
    std::erase_if(held_, [&](const HeldPool& q) { return q.id == id; });
    std::erase_if(checkpoints_, [&](const PoolCheckpoint& c) { return c.pool == id; });
    return "~MemPool" + id.to_string();
  }

  // PyTorch's cudagraph trees: save a held pool's layout, or put a saved
  // one back. A restore frees the run's blocks allocated in the pool and
  // hands out the checkpoint's live ones, which the run then holds; a
  // refused one (a segment released since, a block waiting for events or
  // used on other streams) must change nothing.
  std::string CheckpointOp() {
    if (held_.empty()) return "checkpoint: no pool";
    const PoolId id = held_[std::uniform_int_distribution<size_t>(0, held_.size() - 1)(rng_)].id;
    auto saved = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                              [&](const PoolCheckpoint& c) { return c.pool == id; });
    if (saved == checkpoints_.end() || std::uniform_int_distribution<int>(0, 2)(rng_) == 0) {
      try {
        PoolCheckpoint cp = h_.engine.checkpoint_pool(id);
        if (saved != checkpoints_.end()) *saved = std::move(cp);
        else checkpoints_.push_back(std::move(cp));
        return "checkpoint" + id.to_string();
      } catch (const std::invalid_argument&) {
        return "checkpoint" + id.to_string() + " refused";  // a block waits for events
      }
    }
    const Segments before = Layout(h_.engine);
    const int64_t allocs = h_.stats().allocation[kAllPools].allocated;
    // Live blocks by address, read before the restore recycles any Block.
    absl::flat_hash_map<uintptr_t, size_t> index_of;
    for (size_t i = 0; i < live_.size(); ++i) index_of[live_[i].block->address] = i;
    try {
      const PoolRestore r = h_.engine.restore_pool(*saved);
      std::vector<bool> gone(live_.size(), false);
      for (uintptr_t a : r.freed) {
        auto it = index_of.find(a);
        if (it == index_of.end()) error_ = "restore freed a block the run did not hold";
        else gone[it->second] = true;
      }
      std::vector<Live> kept;
      for (size_t i = 0; i < live_.size(); ++i)
        if (!gone[i]) kept.push_back(live_[i]);
      for (Block* b : r.allocated) kept.push_back({b, b->size, b->stream});
      live_ = std::move(kept);
      ++restores_;
      return "restore" + id.to_string();
    } catch (const std::invalid_argument&) {
      if (Layout(h_.engine) != before || h_.stats().allocation[kAllPools].allocated != allocs)
        error_ = "a refused restore changed the engine";
      ++refused_restores_;
      return "restore" + id.to_string() + " refused";
    }
  }
  bool AnyRoute() const {
    return std::any_of(held_.begin(), held_.end(), [](const HeldPool& p) { return p.routed; });
  }
  // The pool a malloc on `stream` must land in: the newest open route
  // that accepts the stream; null for none.
  const HeldPool* RouteFor(StreamId stream) const {
    const HeldPool* best = nullptr;
    for (const HeldPool& p : held_)
      if (p.routed && (p.every_stream || p.route_stream == stream) &&
          (!best || p.opened > best->opened))
        best = &p;
    return best;
  }
  bool UseOnOom(PoolId id) const {
    return std::find(use_on_oom_.begin(), use_on_oom_.end(), id) != use_on_oom_.end();
  }
  // empty_cache(pool id) synced the events of that pool's blocks only.
  void ForgetPendingOf(PoolId id) {
    std::erase_if(pending_, [&](const Pending& p) { return p.pool == id; });
  }

  std::string RecordStream() {
    Live& l = live_[std::uniform_int_distribution<size_t>(0, live_.size() - 1)(rng_)];
    const StreamId s = RandomStream();
    h_.engine.record_stream(l.block, s);
    const uint32_t bit = 1u << (s / 0x100);
    if (s != l.stream) (AnyRoute() ? l.used_during_routes : l.used_outside_routes) |= bit;
    return "record_stream";
  }

  std::string ToggleEvents() {
    if (!events_held_) {
      h_.device.hold_events(true);
      events_held_ = true;
      return "hold_events";
    }
    h_.device.complete_events();
    pending_.clear();
    if (std::uniform_int_distribution<int>(0, 1)(rng_)) {
      h_.device.hold_events(false);
      events_held_ = false;
    }
    return "complete_events";
  }

  std::string Check() {
    if (!error_.empty()) return error_;
    try {
      h_.engine.check_invariants();
    } catch (const InvariantViolation& e) {
      return e.what();
    }
    const std::vector<SegmentView> segments = h_.engine.segments();
    const bool pages = h_.engine.config().expandable_segments;
    std::string err =
        CompareStats(h_.stats(), Recompute(segments, h_.config.max_split_size), pages);
    // (The device counts mappings, the engine ranges: only bytes compare.)
    if (!pages && h_.device.live_segments() != segments.size())
      err += "device segment count differs; ";
    if (h_.device.used_bytes() != h_.engine.reserved_bytes()) err += "device bytes differ; ";
    for (const HeldPool& p : held_)
      if (h_.engine.pool_use_count(p.id) != p.uses) err += "pool use count differs; ";
    return err;
  }

  const Scenario sc_;
  Harness h_;
  std::mt19937_64 rng_;
  std::vector<Live> live_;
  std::vector<size_t> sizes_;
  size_t next_size_ = 0;
  // Address ranges freed while their stream events are held back, and the
  // pool of each.
  struct Pending {
    uintptr_t start, end;
    PoolId pool;
  };
  std::vector<Pending> pending_;
  bool events_held_ = false;
  std::string error_;  // a failed check made during the operation itself
  int64_t ooms_ = 0, pending_frees_ = 0, empty_caches_ = 0, quiet_releases_ = 0;
  std::vector<HeldPool> held_;
  std::vector<PoolId> use_on_oom_;
  uint64_t next_pool_ = 1, routes_opened_ = 0;
  int64_t pool_ops_ = 0, routed_mallocs_ = 0, deferred_frees_ = 0;
  std::vector<PoolCheckpoint> checkpoints_;  // the newest saved per pool
  int64_t restores_ = 0, refused_restores_ = 0;
};

void RunScenario(const Scenario& sc) {
  const uint64_t seed = BaseSeed() + sc.seed_salt;
  std::cout << "[ seed     ] CACHEALLOC_SEED=" << BaseSeed() << " (this run: " << seed << ")\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  RandomRun run(sc, seed);
  ASSERT_EQ(run.Run(sc.ops), sc.ops);
  // The run must have reached the paths it is meant to cover.
  EXPECT_GT(run.ooms(), 0);
  EXPECT_GT(run.pending_frees(), 0);
  EXPECT_GT(run.empty_caches(), 0);
  // stitch reclaims pages instead of retrying; with pools a route is open
  // for most of the run, and no cache is emptied (so no retry) while one is.
  if (std::string(sc.policy) != "stitch" || !sc.pools) EXPECT_GT(run.stats().num_alloc_retries, 0);
  // A placement policy's own releases (stitch reclaims pages on a miss).
  if (std::string(sc.policy) != "native") EXPECT_GT(run.stats().num_device_free, 0);
  if (sc.quiet_releases) {
    EXPECT_GT(run.quiet_releases(), 0);
  }
  if (sc.pools) {
    EXPECT_GT(run.pool_ops(), 0);
    EXPECT_GT(run.routed_mallocs(), 0);
    EXPECT_GT(run.deferred_frees(), 0);
    EXPECT_GT(run.restores(), 0);
    EXPECT_GT(run.refused_restores(), 0);
  }
  std::cout << "[ counts   ] ops=" << sc.ops << " ooms=" << run.ooms()
            << " pending_frees=" << run.pending_frees()
            << " quiet_releases=" << run.quiet_releases()
            << " device_allocs=" << run.stats().num_device_alloc
            << " pool_ops=" << run.pool_ops() << " routed_mallocs=" << run.routed_mallocs()
            << " deferred_frees=" << run.deferred_frees() << " restores=" << run.restores()
            << " refused_restores=" << run.refused_restores() << "\n";
}

const Scenario kScenarios[] = {
    {"", 4 * kGiB, 0, 4, 0, false},
    {"max_split_size_mb:64", 4 * kGiB, 3 * kGiB, 3, 1, true},
    {"roundup_power2_divisions:4", 3 * kGiB, 0, 4, 2, false},
    {"garbage_collection_threshold:0.6", 4 * kGiB, 5 * kGiB / 2, 3, 3, true},
    {"max_split_size_mb:64", 4 * kGiB, 3 * kGiB, 3, 4, true, true},
    // Placement policies (docs/policies.md): the same checks under their
    // decisions, without and with a limit, with memory pools.
    {"", 4 * kGiB, 0, 4, 5, false, false, "stitch", 100'000},
    {"", 4 * kGiB, 3 * kGiB, 3, 6, false, true, "stitch", 100'000},
    {"", 3 * kGiB, 0, 3, 7, false, false, "unmap_on_free", 60'000},
    {"", 4 * kGiB, 3 * kGiB, 3, 8, false, false, "rescue", 100'000},
    {"max_split_size_mb:64", 4 * kGiB, 3 * kGiB, 3, 9, true, true, "rescue", 100'000},
};
static_assert(4 * kOpsPerConfig >= 1'000'000);

TEST(Randomized, DefaultConfigFourStreams) { RunScenario(kScenarios[0]); }
TEST(Randomized, MaxSplitSize64MiBUnderALimit) { RunScenario(kScenarios[1]); }
TEST(Randomized, RoundupPower2Divisions4) { RunScenario(kScenarios[2]); }
TEST(Randomized, GarbageCollectionThreshold06UnderALimit) { RunScenario(kScenarios[3]); }
TEST(Randomized, MemoryPoolsUnderALimit) { RunScenario(kScenarios[4]); }
TEST(RandomizedPolicy, StitchFourStreams) { RunScenario(kScenarios[5]); }
TEST(RandomizedPolicy, StitchMemoryPoolsUnderALimit) { RunScenario(kScenarios[6]); }
TEST(RandomizedPolicy, UnmapOnFree) { RunScenario(kScenarios[7]); }
TEST(RandomizedPolicy, RescueUnderALimit) { RunScenario(kScenarios[8]); }
TEST(RandomizedPolicy, RescueMemoryPoolsUnderALimit) { RunScenario(kScenarios[9]); }

}  // namespace
}  // namespace cachealloc::testing
