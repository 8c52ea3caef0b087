// The policy seam: the decisions a placement idea changes, behind one
// interface, so that an experiment is a new class, not an edit of the engine.
// The port is the engine's (this file and policy_engine.h): policies
// (allocator/policy/) include it, and the engine never includes a policy.
//
// The decisions (each a hook below; the default of every hook is native's):
//   - where a request is placed: which cached free block serves it
//     (find_cached) and whether that block is cut down to the request
//     (should_split);
//   - what is searched on a miss, and where new memory comes from
//     (on_miss: a whole segment as classic native, pages mapped into a
//     virtual range as expandable native, or anything the policy builds
//     from PolicyEngine's steps);
//   - when memory is mapped (before_map: may refuse, or first give pages
//     back elsewhere) and when it is released (after_free, and whether a
//     failed miss empties the cache and retries: retry_after_release).
//
// Native (classic and expandable) is not a subclass reached through these
// virtual calls: it is the engine's own inline path. An engine without a
// policy (DeviceCachingAllocator::policy() == nullptr) never calls a hook,
// and its cache-hit path costs what it cost before the seam existed (the
// engine's existing one-byte "slow path" test also covers "a policy is
// set"). A policy's engine takes the out-of-line path for every malloc and
// for every free of a block whose memory is mapped (expandable) — policies
// that want to see frees map their memory (shape_config).
//
// Writing one: docs/policies.md. Choosing one by name: policy_registry.h.
//
// Threads: hooks run under the engine's device lock, one at a time. A hook
// may throw what the engine's operation may throw (OutOfMemoryError is
// raised by the engine, not by hooks; BackendError, std::bad_alloc); the
// engine is consistent afterwards, as for any failed malloc or free.
// Units: bytes and addresses.
#pragma once

#include <cstddef>
#include <string_view>

#include "allocator/config/config.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"

namespace cachealloc {

class PolicyEngine;
class ExpandableSegment;

// A request that found no cached block (the engine's miss path).
struct MissRequest {
  size_t size = 0;        // rounded bytes the block must hold
  size_t alloc_size = 0;  // native's whole-segment size for it (segment_size_for)
  StreamId stream = 0;
  BlockPool* pool = nullptr;  // the pool searched (default or private)
  bool is_retry = false;      // after the engine emptied the cache (retry_after_release)
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;

  // The name it is chosen by (policy_registry.h); results and tables show it.
  virtual std::string_view name() const = 0;

  // The config the engine runs under with this policy, from the one it was
  // given (at construction and at every settings change). Lets a policy
  // turn expandable segments on (its memory is then mapped in pages) or
  // choose the page size (large_segment_size). Default: unchanged.
  virtual void shape_config(AllocatorConfig& config) const { (void)config; }

  // Where a request is placed: the free block of `pool` on `stream` that
  // serves `size` rounded bytes, or pool.end() for a miss. The block must
  // be on `stream` and hold at least `size` bytes. Default: native's best
  // fit, with its oversize rules and expandable ordering.
  virtual BlockPool::iterator find_cached(PolicyEngine& engine, BlockPool& pool,
                                          StreamId stream, size_t size);

  // Whether `block` (found for `size` rounded bytes) is cut down to the
  // request, the rest cached. Default: native's should_split.
  virtual bool should_split(PolicyEngine& engine, const Block* block, size_t size);

  // What a miss does: a free block of at least r.size bytes for r.stream in
  // r.pool, not in any free index (the engine hands it out), or null when
  // no memory could be had. Default: native's alloc_block (the memory limit
  // checked with the whole-segment size, then a segment or mapped pages).
  virtual Block* on_miss(PolicyEngine& engine, const MissRequest& r);

  // Whether, when on_miss returned null, the engine does native's OOM
  // path: free oversize cached blocks and retry, then empty the whole cache
  // (counted as a retry) and call on_miss again. A policy that already
  // reclaimed what it could says false: the engine then raises the OOM.
  virtual bool retry_after_release() const { return true; }

  // Called before `bytes` (whole pages of `segment`) are mapped at `start`.
  // False refuses the mapping (the miss then fails). May give back pages
  // elsewhere first (PolicyEngine::unmap_top_pages), except inside the free
  // blocks that touch [start, start + bytes), which the mapping is about to
  // join. Default: true.
  virtual bool before_map(PolicyEngine& engine, ExpandableSegment& segment, uintptr_t start,
                          size_t bytes) {
    (void)engine, (void)segment, (void)start, (void)bytes;
    return true;
  }

  // For a segment whose config gave it cells (AllocatorConfig::
  // large_cell_bytes, page_handles.h), asked after before_map allowed a
  // mapping of `bytes` at `start`: true maps the whole cells of the
  // request's run as one handle each (fewer driver calls; such a cell is
  // later unmapped whole or not at all), false maps pages only. Default:
  // true.
  virtual bool map_in_cells(const PolicyEngine& engine, const ExpandableSegment& segment,
                            uintptr_t start, size_t bytes) {
    (void)engine, (void)segment, (void)start, (void)bytes;
    return true;
  }

  // Called after a block of mapped (expandable) memory was freed and merged
  // with its free neighbours into `merged` (free, indexed). May release or
  // unmap it. Not called for whole-segment blocks (their free is the
  // cache-hit path) or for frees that wait for stream events. Default:
  // nothing (native keeps freed memory cached).
  virtual void after_free(PolicyEngine& engine, Block* merged) { (void)engine, (void)merged; }
  // Whether the user's empty_cache() unmaps the whole free pages of the
  // cached block `free_block` of mapped (expandable) memory. Asked only for
  // empty_cache and blocks of the default pools: never on the OOM path
  // (which releases everything, as native) nor for a released private pool
  // (gone: all of it goes). Default: true (native releases every whole free
  // page).
  virtual bool release_on_empty_cache(const Block* free_block) const {
    (void)free_block;
    return true;
  }
};

}  // namespace cachealloc
