// The allocation and free paths of DeviceCachingAllocator. The order of
// checks, splits, merges and emitted events follows native PyTorch step for
// step; comments name the native function each piece mirrors.
#include "allocator/device_allocator.h"

#include <algorithm>
#include <string>

#include "allocator/errors.h"
#include "allocator/size_policy.h"

namespace cachealloc {

DeviceCachingAllocator::DeviceCachingAllocator(int device,
                                               const AllocatorConfig& config,
                                               DeviceBackend& backend)
    : device_(device), config_(config), backend_(backend) {
  if (config_.per_process_memory_fraction >= 0.0)
    set_memory_fraction(config_.per_process_memory_fraction);
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  // Segments still reserved are returned by the backend's owner (the process
  // is ending or the simulated device is dropped); free the bookkeeping only.
  std::vector<Block*> all;
  for (auto* pool : {&large_blocks_, &small_blocks_})
    for (const auto& e : pool->index()) all.push_back(e.block);
  all.insert(all.end(), active_blocks_.begin(), active_blocks_.end());
  for (Block* b : all) delete b;
  for (Block* b : spare_blocks_) delete b;
}

void DeviceCachingAllocator::add_observer(EngineObserver* observer) {
  observers_.push_back(observer);
}

void DeviceCachingAllocator::remove_observer(EngineObserver* observer) {
  std::erase(observers_, observer);
}

Block* DeviceCachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  return b;
}

void DeviceCachingAllocator::delete_block(Block* block) {
  *block = Block();
  if (spare_blocks_.size() < 4096) spare_blocks_.push_back(block);
  else delete block;
}

Block* DeviceCachingAllocator::malloc(size_t orig_size, StreamId stream,
                                      const ContextPtr& ctx) {
  if (orig_size > kMaxRequestSize)
    throw SizeOverflowError("allocation of " + std::to_string(orig_size) +
                            " bytes exceeds the largest supported request (" +
                            std::to_string(kMaxRequestSize) + " bytes)");
  process_events(ctx);

  Request r;
  r.size = round_request_size(orig_size, config_);
  r.pool = &pool_for(r.size);
  r.alloc_size = segment_size_for(r.size);
  r.stream = stream;

  bool found = get_free_block(r);
  if (!found) {
    if (gc_active()) garbage_collect_cached_blocks(ctx);
    found = alloc_block(r, false, ctx) ||
            (release_available_cached_blocks(r, ctx) && alloc_block(r, false, ctx)) ||
            (release_cached_blocks(ctx) && alloc_block(r, true, ctx));
  }
  if (!found) raise_oom(r, orig_size, ctx);
  return alloc_found_block(r, orig_size, ctx);
}

// native: get_free_block
bool DeviceCachingAllocator::get_free_block(Request& r) {
  BlockPool& pool = *r.pool;
  if (gc_active()) pool.count_search();
  auto it = pool.lower_bound(r.stream, r.size);
  if (it == pool.end() || it->stream != r.stream) return false;
  const size_t found = it->size;
  // An oversize block is not cut down for a small request...
  if (r.size < config_.max_split_size && found >= config_.max_split_size)
    return false;
  // ...and serves a large request only if it wastes less than the rounding
  // allowance.
  if (r.size >= config_.max_split_size &&
      found >= r.size + config_.max_non_split_rounding_size)
    return false;
  r.block = it->block;
  pool.erase(it);
  return true;
}

bool DeviceCachingAllocator::would_hit_cache(size_t orig_size, StreamId stream) const {
  if (orig_size > kMaxRequestSize) return false;
  const size_t size = round_request_size(orig_size, config_);
  auto& self = const_cast<DeviceCachingAllocator&>(*this);
  BlockPool& pool = self.pool_for(size);
  auto it = pool.lower_bound(stream, size);
  if (it == pool.end() || it->stream != stream) return false;
  if (size < config_.max_split_size && it->size >= config_.max_split_size) return false;
  if (size >= config_.max_split_size &&
      it->size >= size + config_.max_non_split_rounding_size)
    return false;
  return true;
}

bool DeviceCachingAllocator::would_exceed_limit(size_t orig_size) const {
  if (orig_size > kMaxRequestSize) return true;
  const size_t size = round_request_size(orig_size, config_);
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

// native: alloc_found_block
Block* DeviceCachingAllocator::alloc_found_block(Request& r, size_t orig_size,
                                                 const ContextPtr& ctx) {
  Block* block = r.block;
  const bool already_split = block->is_split();
  InactiveSplitChange split;
  if (should_split(block, r.size)) {
    // [block | remaining]: the front goes to the caller, the rest is cached.
    Block* remaining = block;
    block = new_block();
    block->address = remaining->address;
    block->size = r.size;
    block->stream = r.stream;
    block->pool = r.pool;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    // The segment's context travels with its first block.
    block->context_when_segment_allocated =
        std::move(remaining->context_when_segment_allocated);
    remaining->prev = block;
    remaining->address += r.size;
    remaining->size -= r.size;
    r.pool->insert(remaining);
    if (already_split) {
      split.bytes = -static_cast<int64_t>(block->size);  // shrinks, count same
    } else {
      split.blocks = 1;
      split.bytes = static_cast<int64_t>(remaining->size);
    }
  } else if (already_split) {
    split.blocks = -1;
    split.bytes = -static_cast<int64_t>(block->size);
  }

  block->allocated = true;
  block->requested_size = orig_size;
  block->context_when_allocated = ctx;
  active_blocks_.insert(block);

  EngineEvent e{EngineEventKind::kAlloc};
  e.pool = kind_of(*r.pool);
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = orig_size;
  e.oversize = oversize(block->size);
  e.split = split;
  e.context = &ctx;
  emit(e);
  return block;
}

void DeviceCachingAllocator::raise_oom(const Request& r, size_t orig_size,
                                       const ContextPtr& ctx) {
  const DeviceMemoryInfo info = backend_.memory_info(device_);
  EngineEvent e{EngineEventKind::kOom};
  e.pool = kind_of(*r.pool);
  e.stream = r.stream;
  e.address = info.free_bytes;
  e.size = r.size;
  e.requested = orig_size;
  e.context = &ctx;
  emit(e);

  OutOfMemoryError::Details d;
  d.device = device_;
  d.requested_bytes = orig_size;
  d.allocation_bytes = r.alloc_size;
  d.device_total = info.total_bytes;
  d.device_free = info.free_bytes;
  d.limit_set = limit_.is_set();
  d.allowed_bytes = limit_.allowed_bytes();
  d.reserved_bytes = reserved_bytes_;
  size_t allocated = 0;
  for (const Block* b : active_blocks_)
    if (b->allocated) allocated += b->size;
  d.allocated_bytes = allocated;
  throw OutOfMemoryError(d);
}

// native: free
void DeviceCachingAllocator::free(Block* block, const ContextPtr& ctx) {
  block->allocated = false;
  EngineEvent e{EngineEventKind::kFreeRequested};
  e.pool = kind_of(*block->pool);
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = block->requested_size;
  e.oversize = oversize(block->size);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  emit(e);

  if (!block->stream_uses.empty()) {
    insert_events(block);
  } else {
    free_block(block, ctx);
  }
}

// native: free_block
void DeviceCachingAllocator::free_block(Block* block, const ContextPtr& ctx) {
  EngineEvent e{EngineEventKind::kFreeCompleted};
  e.pool = kind_of(*block->pool);
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = block->requested_size;
  ContextPtr allocated_ctx = std::move(block->context_when_allocated);
  e.context = ctx ? &ctx : &allocated_ctx;

  BlockPool& pool = *block->pool;
  InactiveSplitChange split;
  for (Block* neighbour : {block->prev, block->next}) {
    const size_t subsumed = try_merge_blocks(block, neighbour, pool);
    if (subsumed > 0) {
      split.blocks -= 1;
      split.bytes -= static_cast<int64_t>(subsumed);
    }
  }
  active_blocks_.erase(block);
  pool.insert(block);
  if (block->is_split()) {
    split.blocks += 1;
    split.bytes += static_cast<int64_t>(block->size);
  }
  e.split = split;
  emit(e);
}

// native: try_merge_blocks. Returns the bytes absorbed from `src`, 0 if it
// cannot be merged (absent or in use).
size_t DeviceCachingAllocator::try_merge_blocks(Block* dst, Block* src,
                                                BlockPool& pool) {
  if (!src || !src->is_free()) return 0;
  pool.erase(src);
  if (dst->prev == src) {  // [src dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    dst->context_when_segment_allocated =
        std::move(src->context_when_segment_allocated);
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const size_t subsumed = src->size;
  dst->size += subsumed;
  delete_block(src);
  return subsumed;
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
    for (const auto& e : pool->index()) largest = std::max(largest, e.size);
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
