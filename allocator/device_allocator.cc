// The allocation and free paths of DeviceCachingAllocator. The order of
// checks, splits, merges and emitted events follows native PyTorch step for
// step; comments name the native function each piece mirrors.
#include "allocator/device_allocator.h"

#include <algorithm>
#include <memory>
#include <string>

#include "allocator/errors.h"
#include "allocator/oom_report.h"
#include "allocator/size_policy.h"

namespace cachealloc {

DeviceCachingAllocator::DeviceCachingAllocator(int device,
                                               const AllocatorConfig& config,
                                               DeviceBackend& backend)
    : device_(device),
      config_(config),
      power2_divisions_(has_power2_divisions(config_)),
      backend_(backend) {
  if (config_.per_process_memory_fraction >= 0.0)
    set_memory_fraction(config_.per_process_memory_fraction);
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  // Segments still reserved are returned by the backend's owner (the process
  // is ending or the simulated device is dropped); free the bookkeeping only.
  for (Block* head : segment_heads_) {
    for (Block* b = head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
  for (Block* b : spare_blocks_) delete b;
}

void DeviceCachingAllocator::add_observer(EngineObserver* observer) {
  observers_.push_back(observer);
}

void DeviceCachingAllocator::remove_observer(EngineObserver* observer) {
  std::erase(observers_, observer);
}

Block* DeviceCachingAllocator::malloc(size_t orig_size, StreamId stream,
                                      const ContextPtr& ctx) {
  if (orig_size > kMaxRequestSize)
    throw SizeOverflowError("allocation of " + std::to_string(orig_size) +
                            " bytes exceeds the largest supported request (" +
                            std::to_string(kMaxRequestSize) + " bytes)");
  if (!events_.empty()) process_events(ctx);  // cross-stream frees are rare

  Request r;
  r.size = rounded_request(orig_size);
  r.pool = &pool_for(r.size);
  r.stream = stream;

  bool found = get_free_block(r);
  if (!found) {
    r.alloc_size = segment_size_for(r.size);
    if (gc_active()) garbage_collect_cached_blocks(ctx);
    found = alloc_block(r, false, ctx) ||
            (release_available_cached_blocks(r, ctx) && alloc_block(r, false, ctx)) ||
            (release_cached_blocks(ctx) && alloc_block(r, true, ctx));
  }
  if (!found) raise_oom(r, orig_size, ctx);
  return alloc_found_block(r, orig_size, ctx);
}

// native: get_free_block's choice. The smallest free block on the stream
// that holds `size`, or pool.end() when there is none or the oversize rules
// refuse it.
BlockPool::iterator DeviceCachingAllocator::find_free_block(BlockPool& pool, StreamId stream,
                                                            size_t size) const {
  auto it = pool.lower_bound(stream, size);
  if (BlockPool::is_end(it) || it->stream != stream) return pool.end();
  // An oversize block is not cut down for a small request...
  if (size < config_.max_split_size && it->size >= config_.max_split_size) return pool.end();
  // ...and serves a large request only if it wastes less than the rounding
  // allowance.
  if (size >= config_.max_split_size && it->size >= size + config_.max_non_split_rounding_size)
    return pool.end();
  return it;
}

// native: get_free_block
bool DeviceCachingAllocator::get_free_block(Request& r) {
  BlockPool& pool = *r.pool;
  if (gc_active()) pool.count_search();
  auto it = find_free_block(pool, r.stream, r.size);
  if (BlockPool::is_end(it)) return false;
  // Left indexed: alloc_found_block re-indexes the entry for the remainder
  // or erases it, whichever the split decision needs.
  r.block = it->block;
  r.slot = it;
  return true;
}

bool DeviceCachingAllocator::would_hit_cache(size_t orig_size, StreamId stream) const {
  if (orig_size > kMaxRequestSize) return false;
  const size_t size = rounded_request(orig_size);
  // Lookups do not change the pool; pool_for just has no const overload.
  BlockPool& pool = const_cast<DeviceCachingAllocator&>(*this).pool_for(size);
  return !BlockPool::is_end(find_free_block(pool, stream, size));
}

bool DeviceCachingAllocator::would_exceed_limit(size_t orig_size) const {
  if (orig_size > kMaxRequestSize) return true;
  const size_t size = rounded_request(orig_size);
  return limit_.refuses(reserved_bytes_, segment_size_for(size));
}

bool DeviceCachingAllocator::would_collect_garbage() const {
  if (!gc_active()) return false;
  const auto threshold = static_cast<size_t>(config_.garbage_collection_threshold *
                                             static_cast<double>(limit_.allowed_bytes()));
  return reserved_bytes_ > threshold;
}

// native: alloc_block (non-expandable path)
bool DeviceCachingAllocator::alloc_block(Request& r, bool is_retry,
                                         const ContextPtr& ctx) {
  if (is_retry) {
    EngineEvent e{EngineEventKind::kAllocRetry};
    emit(e);
  }
  const size_t size = r.alloc_size;
  if (limit_.refuses(reserved_bytes_, size)) return false;
  const uintptr_t address = backend_.allocate(device_, size, r.stream);
  if (address == 0) return false;

  reserved_bytes_ += size;
  Block* b = new_block();
  b->address = address;
  b->size = size;
  b->stream = r.stream;
  b->pool = r.pool;
  b->context_when_segment_allocated = ctx;
  r.block = b;
  r.slot = r.pool->end();
  segment_heads_.insert(b);

  EngineEvent e{EngineEventKind::kSegmentAlloc};
  e.pool = kind_of(*r.pool);
  e.stream = r.stream;
  e.address = address;
  e.size = size;
  e.oversize = oversize(size);
  e.context = &ctx;
  emit(e);
  return true;
}

// native: should_split (non-expandable)
bool DeviceCachingAllocator::should_split(const Block* block, size_t size) const {
  const size_t remaining = block->size - size;
  if (block->pool->is_small()) return remaining >= kMinBlockSize;
  return size < config_.max_split_size && remaining > kSmallSize;
}

// native: alloc_found_block. Native moves the remainder into the old Block
// object and makes a new one for the front; here the front keeps the object
// (so segment heads are stable) and the remainder is new. Addresses, sizes,
// requested sizes and statistics come out the same.
Block* DeviceCachingAllocator::alloc_found_block(Request& r, size_t orig_size,
                                                 const ContextPtr& ctx) {
  Block* block = r.block;
  const bool already_split = block->is_split();
  InactiveSplitChange split;
  if (should_split(block, r.size)) {
    // [block | remaining]: the front goes to the caller, the rest is cached.
    Block* remaining = new_block();
    remaining->address = block->address + r.size;
    remaining->size = block->size - r.size;
    remaining->requested_size = block->requested_size;  // as native's reused object
    remaining->stream = block->stream;
    remaining->pool = block->pool;
    remaining->prev = block;
    remaining->next = block->next;
    if (remaining->next) remaining->next->prev = remaining;
    block->next = remaining;
    block->size = r.size;
    if (BlockPool::is_end(r.slot)) r.pool->insert(remaining);
    else r.pool->replace(r.slot, remaining);  // usually in place: same rank
    if (already_split) {
      split.bytes = -static_cast<int64_t>(block->size);  // shrinks, count same
    } else {
      split.blocks = 1;
      split.bytes = static_cast<int64_t>(remaining->size);
    }
  } else {
    if (!BlockPool::is_end(r.slot)) r.pool->erase(r.slot);
    if (already_split) {
      split.blocks = -1;
      split.bytes = -static_cast<int64_t>(block->size);
    }
  }

  block->allocated = true;
  block->requested_size = orig_size;
  block->context_when_allocated = ctx;
  allocated_bytes_ += block->size;

  EngineEvent e = block_event(EngineEventKind::kAlloc, block);
  e.split = split;
  e.context = &ctx;
  emit(e);
  return block;
}

void DeviceCachingAllocator::raise_oom(const Request& r, size_t orig_size,
                                       const ContextPtr& ctx) {
  OomFacts f;
  f.device = device_;
  f.pool = kind_of(*r.pool);
  f.stream = r.stream;
  f.rounded = r.size;
  f.requested = orig_size;
  f.allocation = r.alloc_size;
  f.reserved = reserved_bytes_;
  f.allocated = allocated_bytes_;
  report_out_of_memory(f, backend_.memory_info(device_), limit_, ctx,
                       [this](EngineEvent& e) { emit(e); });
}

// native: free
void DeviceCachingAllocator::free(Block* block, const ContextPtr& ctx) {
  block->allocated = false;
  allocated_bytes_ -= block->size;
  if (block->stream_uses.empty()) [[likely]] {
    // Back in the cache at once: one kFree event for native's two steps.
    cache_freed_block(block, ctx, EngineEventKind::kFree);
    return;
  }
  EngineEvent e = block_event(EngineEventKind::kFreeRequested, block);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  emit(e);
  insert_events(block);
}

// native: free_block, for a block whose stream events have completed.
void DeviceCachingAllocator::free_block(Block* block, const ContextPtr& ctx) {
  cache_freed_block(block, ctx, EngineEventKind::kFreeCompleted);
}

// native: free_block's body, shared by free() (kFree) and free_block().
void DeviceCachingAllocator::cache_freed_block(Block* block, const ContextPtr& ctx,
                                               EngineEventKind kind) {
  EngineEvent e = block_event(kind, block);
  ContextPtr allocated_ctx = std::move(block->context_when_allocated);
  e.context = ctx ? &ctx : &allocated_ctx;

  BlockPool& pool = *block->pool;
  InactiveSplitChange split;
  Block* merged = merge_and_cache(block, pool, split);
  if (merged->is_split()) {
    split.blocks += 1;
    split.bytes += static_cast<int64_t>(merged->size);
  }
  e.split = split;
  emit(e);
}

// native: the two try_merge_blocks calls of free_block (lower neighbour
// first), then the insert into the pool. Each free neighbour absorbed counts
// as one inactive split block of its size leaving. The lower neighbour
// absorbs `block` (native does the reverse) so segment heads keep their
// objects; the merged block keeps the freed block's requested size, as
// native's does. The merged block takes over a merged neighbour's index
// entry (BlockPool::replace), which usually needs no tree restructuring.
// Returns the merged block, indexed.
Block* DeviceCachingAllocator::merge_and_cache(Block* block, BlockPool& pool,
                                               InactiveSplitChange& split) {
  const size_t requested = block->requested_size;
  Block* const prev = block->prev && block->prev->is_free() ? block->prev : nullptr;
  Block* const next = block->next && block->next->is_free() ? block->next : nullptr;
  // Look entries up while the neighbours' keys are intact. Free blocks are
  // always indexed (block.h), so both lookups find their entry.
  BlockPool::iterator slot = pool.end();
  if (next) {
    if (prev) pool.erase(next);
    else slot = pool.find(next);
  }
  if (prev) slot = pool.find(prev);

  // `lower` takes over its upper neighbour's bytes; `upper` is recycled.
  // The free neighbour absorbed leaves the inactive split stats.
  auto absorb = [&](Block* lower, Block* upper, const Block* free_neighbour) {
    split.blocks -= 1;
    split.bytes -= static_cast<int64_t>(free_neighbour->size);
    lower->size += upper->size;
    lower->next = upper->next;
    if (lower->next) lower->next->prev = lower;
    delete_block(upper);
  };
  if (prev) {
    absorb(prev, block, prev);
    block = prev;
  }
  if (next) absorb(block, next, next);
  block->requested_size = requested;
  block->context_when_allocated = nullptr;
  if (BlockPool::is_end(slot)) pool.insert(block);
  else pool.replace(slot, block);
  return block;
}

void DeviceCachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw ConfigError("memory fraction must be in [0, 1], got " +
                      std::to_string(fraction));
  limit_.set_fraction(fraction, backend_.memory_info(device_).total_bytes);
}

void DeviceCachingAllocator::set_memory_limit(size_t bytes) { limit_.set_bytes(bytes); }

size_t DeviceCachingAllocator::largest_cached_block() const {
  size_t largest = 0;
  for (const BlockPool* pool : {&large_blocks_, &small_blocks_})
    for (const auto& e : pool->entries()) largest = std::max(largest, e.size);
  return largest;
}

uintptr_t DeviceCachingAllocator::base_allocation(const Block* block,
                                                  size_t* segment_bytes) const {
  while (block->prev) block = block->prev;
  const uintptr_t base = block->address;
  if (segment_bytes) {
    size_t total = 0;
    for (; block; block = block->next) total += block->size;
    *segment_bytes = total;
  }
  return base;
}

}  // namespace cachealloc
