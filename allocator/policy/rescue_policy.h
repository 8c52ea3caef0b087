// "rescue": native's expandable segments in every step that fits, and page
// work only where a request would otherwise fail. Built for issue 48: keep
// native's speed (no device call per repeated step once warm) and recover
// the memory native strands under a memory limit.
//
// Where native's expandable segments strand memory under a limit (the strand
// suite's traces, docs/fragmentation.md):
//   - partly used pages: a large block's range is mapped in 20 MiB pages, so
//     every free hole between live blocks keeps the partial pages at its two
//     ends mapped, and the OOM path cannot release them;
//   - the limit check: native refuses a miss when reserved + the request's
//     whole-segment size passes the limit, even when the free block at the
//     top of the range already holds most of it and only a few pages are
//     missing; its OOM path then unmaps every free page of every block (the
//     next steps map them all again) and retries once.
//
// The rules:
//   - Pages: 2 MiB in both pools (native's large pool: 20 MiB), so a hole
//     strands at most 2 MiB at each end. Everything else of the config is
//     the user's (max_split_size, rounding, garbage collection).
//   - Physical handles (driver calls): one per 2 MiB page, except in the
//     large pool without a limit, and under one for a mapping whose room
//     came from another stream's free pages (map_in_cells): there the
//     request's part of the mapping is cut into 20 MiB cells from its start,
//     one handle each (one create + one map, later one unmap + one release,
//     as native's page), 2 MiB handles for its ragged end
//     (AllocatorConfig::large_cell_bytes, page_handles.h). A cell goes
//     whole or not at all, so a free run that ends inside one keeps it
//     mapped; that is why same-stream mappings under a limit, where rescue
//     repairs fragmentation, keep 2 MiB handles. The memory that moves
//     between stream-private caches every step (two_streams) is mapped and
//     unmapped whole, so cells cost it nothing while the limit has room
//     to spare. Only while it has: a cell that a later free run cuts stays
//     mapped whole, so at the very limit (the peak allocated so far within
//     a kCellHeadroomDivisor-th of it) every mapping keeps 2 MiB handles and
//     the last MiB go to the step, not to driver-call savings (on the H100,
//     two_streams with cells at the limit lost the 128 tokens rescue had
//     closed; with headroom, the calls are where the step time goes).
//   - Hits, splits, frees: native's (the default hooks). No page is ever
//     unmapped outside a miss that would pass the limit, the OOM path and
//     empty_cache, so a step that repeats one already run makes no device
//     call: its misses were mapped in an earlier step and stay.
//   - empty_cache: a large-pool free block is unmapped only when it is at
//     least kLargeBuffer (20 MiB), as native's pages allow; smaller free runs
//     (whose 2 MiB pages native could not release) stay mapped and serve the
//     next step without a device call. The small pool, and the OOM path and
//     a released private pool everywhere, release every whole free page.
//   - Miss without a limit: native's search (lowest gap of the stream's
//     range with room), the pages it needs mapped.
//   - Miss under a limit: the same search, checked against the pages it
//     really maps (reserved + new pages <= limit). When they do not fit,
//     whole free pages of other cached blocks are unmapped first (before_map),
//     largest blocks first (fewest calls), each giving the top of its whole
//     handles, exactly what the mapping still needs (rounded up to whole
//     handles), until the mapping fits; never those of the free blocks the
//     mapping joins. (Giving all of a block's pages moved several times the
//     bytes per step on two_streams: each stream mapped back what it lost.) Only when that is not enough does native's OOM path run (wait
//     for stream events, unmap every free page, retry once, else raise).
//   - While a private pool is routed to (a CUDA graph may capture), nothing
//     is unmapped (unmapping waits for a stream): the miss maps or fails as
//     native's. A MemPool with its own allocator gets whole segments from it.
//
// Costs: the hit path is the engine's out-of-line one (a virtual call per
// malloc), no device call. A miss that reclaims scans the default pools'
// free blocks (O(free blocks)) and makes one unmap call per block it takes
// pages from. Invariants: the engine's; reserved never passes the limit;
// only whole pages inside free blocks are unmapped.
#pragma once

#include "allocator/engine/port/placement_policy.h"

namespace cachealloc {

class RescuePolicy : public PlacementPolicy {
 public:
  std::string_view name() const override { return "rescue"; }
  void shape_config(AllocatorConfig& config) const override;
  Block* on_miss(PolicyEngine& engine, const MissRequest& r) override;
  bool before_map(PolicyEngine& engine, ExpandableSegment& segment, uintptr_t start,
                  size_t bytes) override;
  bool map_in_cells(const PolicyEngine& engine, const ExpandableSegment& segment, uintptr_t start,
                    size_t bytes) override;
  bool release_on_empty_cache(const Block* free_block) const override;
  // Native's best fit; notes the largest allocated bytes a request asks to
  // reach within the limit (for map_in_cells' headroom). A compare per
  // malloc.
  BlockPool::iterator find_cached(PolicyEngine& engine, BlockPool& pool, StreamId stream,
                                  size_t size) override;

  // Cells need the step's peak allocated at least limit / this below the
  // limit (5 %: at 82 % of the physical size two_streams' step, where its
  // timing runs, has 18 %; at its largest under the limit, about 1 %).
  static constexpr size_t kCellHeadroomDivisor = 20;

 private:
  // Unmaps whole free pages of cached blocks of the default pools until at
  // least `target` bytes went (fewer if the cache has fewer), never inside
  // the free blocks touching [start, start + bytes); notes whether a block
  // of a stream other than `stream` gave any. Returns the bytes.
  size_t reclaim(PolicyEngine& engine, uintptr_t start, size_t bytes, size_t target,
                 StreamId stream);
  // Set by before_map for the mapping it allowed, read by map_in_cells for
  // the same mapping (the engine asks the two in a row).
  bool took_from_other_stream_ = false;
  // The largest allocated_bytes() + rounded request size find_cached has
  // met, counting only requests within the limit (bytes): the process's
  // peak allocated so far. A request past the limit cannot succeed, so an
  // OOM a script catches (a batch-size finder) does not turn cells off for
  // good; one that fails by fragmentation within the limit does count (the
  // step is near the limit then anyway). Never lowered: a step that
  // repeats reaches its peak again.
  size_t peak_allocated_ = 0;
};

}  // namespace cachealloc
