// The engine's side of the policy port: what a placement policy may do to
// the engine, native's steps as primitives, for the hooks of
// placement_policy.h. One PolicyEngine lives for one engine operation (a
// malloc or a free) and carries that operation's context.
//
// It reaches the engine only through the parts' own interfaces (Parts
// below: DeviceSegments for memory, PrivatePools for the routes, the
// default pools for their free blocks), never the engine's privates, so a
// policy can do nothing the parts do not offer.
//
// Every step keeps the engine's invariants (block.h, device_segments.h,
// expandable_segment.h) and emits the events native's would (statistics
// and history see them), so a policy built from these steps is checked by
// check_invariants() and counted by the same observers as native. Costs as
// the native functions they call; the scans (for_each_free_block) are
// O(free blocks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/config/config.h"
#include "allocator/config/memory_limit.h"
#include "allocator/engine/blocks/best_fit.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/blocks/block_pool.h"
#include "allocator/engine/expandable/expandable_segment.h"
#include "allocator/engine/pools/private_pools.h"
#include "allocator/engine/port/placement_policy.h"
#include "allocator/engine/segments/device_segments.h"

namespace cachealloc {

class PolicyEngine {
 public:
  // The engine's parts a policy reaches; each outlives the PolicyEngine.
  struct Parts {
    const AllocatorConfig& config;     // in force
    DeviceSegments& segments;          // memory held from the device
    const PrivatePools& pools;         // routes (a capture may be underway)
    BlockPool& small;                  // the default pools
    BlockPool& large;
    const size_t& allocated_bytes;     // the engine's bytes handed out
    PlacementPolicy& policy;           // its before_map guards every mapping
  };
  PolicyEngine(const Parts& parts, const ContextPtr& ctx) : p_(parts), ctx_(ctx) {}

  const AllocatorConfig& config() const { return p_.config; }
  // Bytes held from the device now (mapped pages and whole segments).
  size_t reserved_bytes() const { return p_.segments.reserved_bytes(); }
  size_t allocated_bytes() const { return p_.allocated_bytes; }
  const MemoryLimit& limit() const { return p_.segments.limit(); }

  // native: get_free_block's choice (expandable ordering when expandable
  // segments exist).
  BlockPool::iterator native_find_cached(BlockPool& pool, StreamId stream, size_t size) const {
    return p_.segments.find_cached(pool, stream, size);
  }
  bool native_should_split(const Block* block, size_t size) const {
    return should_split(block, size, p_.config);
  }
  // native: alloc_block. A segment (or mapped pages) for the request, or
  // null when the memory limit or the device refused.
  Block* native_alloc(const MissRequest& r);
  // Pages mapped for the request into the stream's virtual range of
  // r.pool (native's try_allocate_expandable_block: lowest gap with room,
  // grown from the free block below it, a new range reserved when none has
  // room), without native's whole-segment limit check: before_map decides.
  // Requires expandable segments on (shape_config). Null when refused.
  Block* map_for(const MissRequest& r);

  // Whether a private pool is routed to: a CUDA graph may be capturing, and
  // the device must not be synchronized then. Unmapping waits for the
  // block's stream (DeviceBackend::unmap_pages), so a policy must not unmap
  // while this is true (native's release paths wait for the routes too).
  bool routing() const { return p_.pools.routing(); }

  // The free blocks of the default pools (small and large), in index order:
  // fn(Block*). Private pools' blocks are not offered (their memory belongs
  // to a graph or MemPool). fn must not change the pools.
  template <typename Fn>
  void for_each_free_block(Fn&& fn) const {
    for (const auto& e : p_.small.entries()) fn(e.block);
    for (const auto& e : p_.large.entries()) fn(e.block);
  }
  // The expandable segment holding `address`, or null.
  ExpandableSegment* segment_of(uintptr_t address) const {
    return p_.segments.expandable_segment_of(address);
  }
  // native: unmap_block. Unmaps every whole page inside free block `b`
  // (indexed, expandable); one device call.
  // A segment left with nothing mapped stays reserved (expandable_blocks.h,
  // EmptySegment::kKeep).
  void unmap_free_pages(Block* b);
  // Unmaps the top `bytes` (whole pages, at most those inside `b`) of free
  // block `b`'s whole pages, keeping the rest of b mapped and cached; one
  // device call. Returns the bytes unmapped.
  size_t unmap_top_pages(Block* b, size_t bytes);
  // Whole pages inside [address, address + size) of `segment`, in bytes.
  static size_t whole_page_bytes(const ExpandableSegment& segment, uintptr_t address,
                                 size_t size);

 private:
  // ExpandableBlocks::MayMap: the policy's before_map, with this engine,
  // then (segments with cells) its map_in_cells.
  bool may_map(ExpandableSegment& segment, uintptr_t start, size_t bytes, bool* cells) {
    if (!p_.policy.before_map(*this, segment, start, bytes)) return false;
    if (*cells) *cells = p_.policy.map_in_cells(*this, segment, start, bytes);
    return true;
  }

  const Parts p_;  // references: cheap to copy
  const ContextPtr& ctx_;
};

}  // namespace cachealloc
