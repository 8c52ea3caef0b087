// "stitch": cachealloc's first policy of its own. Memory is virtual ranges
// over physical pages (expandable segments, 2 MiB pages in both pools), and
// a page is just a page: when a miss must map pages and the cache holds
// whole free pages elsewhere, those are unmapped and mapped where the
// request needs contiguous addresses (GMLake's stitching, on VMM), so
// reserved memory follows the pages that hold live bytes.
//
//   - Hits: native's best fit (expandable ordering); blocks split whenever
//     512 bytes would remain; no oversize rules (max_split_size unlimited:
//     they fight the fragmentation that page reuse removes).
//   - Miss: native's search for room (lowest gap of the stream's range that
//     has room, grown from the free block below it). Before its pages are
//     mapped (before_map):
//       without a memory limit, that many whole free pages are taken from
//       the cache first (largest free blocks first: fewest device calls),
//       so reserved grows only when no whole free page is cached; except a
//       miss below the live peak (a repeating step), which maps without
//       taking pages while such bytes stay within 1/32 of the live peak
//       and reserved under max(high-water mark, live peak + that slack):
//       the pages then stay and serve it next step (no calls per step);
//       under a limit, nothing is taken while the mapping fits, and a miss
//       maps ahead (up to max(64 MiB, reserved / 4), 8 MiB in the small
//       pool) while the limit has room; otherwise free blocks give all their whole pages, largest
//       first, until the mapping fits (no emptying of the whole cache, no
//       retry).
//   - A miss that still does not fit takes native's OOM path (counted as a
//     retry): wait for every stream event, unmap every whole free page
//     (also those next to the mapping, and blocks freed on other streams),
//     try again, else raise the OOM. So an OOM leaves the cache as native's.
//   - Frees: native's (merged, cached). empty_cache: unmaps only cached
//     free blocks of at least kKeepBelow (20 MiB) of the default pools; a
//     released private pool and the OOM path, all.
//   - Private pools (graphs, MemPool) map pages as the default pools do;
//     their free pages are not taken for others. While a pool is routed to
//     (a CUDA graph may be capturing) nothing is unmapped: unmapping waits
//     for a stream. A miss then maps new pages, or fails as native's would. A MemPool with its own
//     allocator gets whole segments from it, as native.
//
// Costs: a miss that reclaims scans the default pools' free blocks
// (O(free blocks)) and makes one unmap call per block it takes pages from.
// Invariants: those of the engine; page reuse never unmaps a page that
// holds a byte of an allocated block (only whole pages inside free blocks).
#pragma once

#include "allocator/engine/port/placement_policy.h"

namespace cachealloc {

class StitchPolicy : public PlacementPolicy {
 public:
  std::string_view name() const override { return "stitch"; }
  void shape_config(AllocatorConfig& config) const override;
  BlockPool::iterator find_cached(PolicyEngine& engine, BlockPool& pool, StreamId stream,
                                  size_t size) override;
  Block* on_miss(PolicyEngine& engine, const MissRequest& r) override;
  bool before_map(PolicyEngine& engine, ExpandableSegment& segment, uintptr_t start,
                  size_t bytes) override;
  bool release_on_empty_cache(const Block* free_block) const override;

 private:
  // Unmaps at least `target` bytes of whole free pages (fewer if the cache
  // has fewer), never inside the free blocks touching [start, start +
  // bytes), which the mapping joins. Returns the bytes unmapped.
  size_t reclaim(PolicyEngine& engine, uintptr_t start, size_t bytes, size_t target);

  // Bytes a miss maps at once under a limit with room (on_miss), by pool;
  // in the large pool at least reserved / kMapAheadDivisor.
  // Chosen on the bundled traces (benchmarks/fragmentation/policy_table.py):
  // 20/0 MiB made more device calls than native's best on 7 traces, 64/8 on
  // 3, 128/8 on 2 but OOMed on one at native's best minimum. With the
  // growing granule (2026-11-28, min-memory judging reserved too), 64/8
  // and divisor 8 or 16 missed on 3-4 traces, divisor 4 on 1 (x_fuzz_gc_frac,
  // whose calls are mostly empty_cache's), divisor 2 on the same one with
  // fewer calls but up to 1.5x reserved mapped at once.
  // Without a limit: the peak of allocated bytes with the request being
  // served (find_cached), that request's figure, and the bytes mapped
  // without taking pages (the slack).
  size_t alloc_peak_ = 0;
  size_t last_request_ = 0;
  size_t slack_used_ = 0;
  size_t high_water_ = 0;  // the most bytes reserved so far
  static constexpr size_t kSlackDivisor = 32;

  static constexpr size_t kMapAheadLarge = size_t{64} << 20;
  static constexpr size_t kMapAheadSmall = size_t{8} << 20;
  static constexpr size_t kMapAheadDivisor = 4;
  // empty_cache() unmaps a cached block's pages only when the block is at
  // least this large (native's large page, 20 MiB): smaller free runs stay
  // mapped for the next step (an island between live blocks is reused as it
  // is; native's 20 MiB pages cannot release such runs either). Memory they
  // hold is still given back on demand: a miss under a limit and the OOM
  // path take whole free pages of any size.
  static constexpr size_t kKeepBelow = size_t{20} << 20;
};

}  // namespace cachealloc
