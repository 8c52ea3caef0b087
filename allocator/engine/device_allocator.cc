// DeviceCachingAllocator outside the cache-hit path (which is
// device_allocator_hot.h): reserving segments, OOM, the kFreeCompleted free,
// limits and lookups. The order of checks, splits, merges and emitted events
// follows native PyTorch step for step; comments name the native function
// each piece mirrors.
#include "allocator/engine/device_allocator.h"

#include <algorithm>
#include <memory>
#include <string>

#include "allocator/base/errors.h"
#include "allocator/engine/engine_events.h"
#include "allocator/engine/size_policy.h"
#include "allocator/policy/policy_engine.h"

namespace cachealloc {

DeviceCachingAllocator::DeviceCachingAllocator(int device,
                                               const AllocatorConfig& config,
                                               DeviceBackend& backend,
                                               std::unique_ptr<PlacementPolicy> policy)
    : device_(device),
      config_(config),
      power2_divisions_(has_power2_divisions(config_)),
      backend_(backend),
      policy_(std::move(policy)) {
  if (policy_) {
    policy_->shape_config(config_);
    power2_divisions_ = has_power2_divisions(config_);
  }
  set_expandable_segments(config_.expandable_segments);
  if (config_.per_process_memory_fraction >= 0.0)
    set_memory_fraction(config_.per_process_memory_fraction);
}

AllocatorConfig DeviceCachingAllocator::shaped(const AllocatorConfig& given) const {
  AllocatorConfig config = given;
  if (policy_) policy_->shape_config(config);
  return config;
}

void DeviceCachingAllocator::put_in_force(AllocatorConfig&& config) noexcept {
  // expandable_segments at run time changes where new memory is mapped and,
  // when turned off, whether free expandable blocks are reused (native reads
  // the setting at each request).
  const bool expandable_changed = config.expandable_segments != config_.expandable_segments;
  config_ = std::move(config);
  power2_divisions_ = has_power2_divisions(config_);
  if (expandable_changed) set_expandable_segments(config_.expandable_segments);
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
}

void DeviceCachingAllocator::add_observer(EngineObserver* observer) {
  observers_.push_back(observer);
}

void DeviceCachingAllocator::remove_observer(EngineObserver* observer) {
  std::erase(observers_, observer);
}

void DeviceCachingAllocator::refuse_size(size_t size) {
  throw SizeOverflowError("allocation of " + std::to_string(size) +
                          " bytes exceeds the largest supported request (" +
                          std::to_string(kMaxRequestSize) + " bytes)");
}

// native: malloc, out of line: with events to poll or expandable segments.
Block* DeviceCachingAllocator::malloc_slow(size_t orig_size, StreamId stream,
                                           const ContextPtr& ctx) {
  // Native leaves cross-stream frees pending while a private pool is routed
  // to (a CUDA graph may be capturing: no event may be queried then), except
  // those the capture's graph already orders before this stream's work.
  if (malloc_slow_ & kStreamWork) {
    if (!routing_) process_events(ctx);
    else if (config_.graph_capture_record_stream_reuse) free_safe_in_capture(stream, ctx);
  }
  const size_t size = rounded_request(orig_size);
  BlockPool& pool = pool_for(size, stream);
  if (gc_active()) pool.count_search();
  if (policy_) return malloc_with_policy(pool, stream, size, orig_size, ctx);
  BlockPool::iterator slot = expandable_.empty()
                                  ? find_free_block(pool, stream, size)
                                  : expandable_.find_free_block(pool, stream, size, config_);
  Block* block;
  if (!BlockPool::is_end(slot)) {
    block = slot->block;
  } else {
    block = reserve_segment(pool, stream, size, orig_size, ctx);
    slot = pool.end();
  }
  return alloc_found_block(pool, block, slot, size, orig_size, ctx, SplitChoice::kByRule,
                           /*expandable_aware=*/true);
}

Block* DeviceCachingAllocator::malloc_with_policy(BlockPool& pool, StreamId stream, size_t size,
                                                  size_t orig_size, const ContextPtr& ctx) {
  PolicyEngine engine(*this, ctx);
  BlockPool::iterator slot = policy_->find_cached(engine, pool, stream, size);
  Block* block;
  if (!BlockPool::is_end(slot)) {
    block = slot->block;
  } else {
    block = reserve_segment(pool, stream, size, orig_size, ctx);
    slot = pool.end();
  }
  const SplitChoice choice =
      policy_->should_split(engine, block, size) ? SplitChoice::kSplit : SplitChoice::kWhole;
  return alloc_found_block(pool, block, slot, size, orig_size, ctx, choice,
                           /*expandable_aware=*/true);
}

void DeviceCachingAllocator::free_slow(Block* block, const ContextPtr& ctx) {
  if (!block->stream_uses.empty()) {
    try {
      free_used_elsewhere(block, ctx);
    } catch (...) {
      // It changed nothing (all or nothing): the caller still holds the
      // block, as before free() began.
      block->allocated = true;
      allocated_bytes_ += block->size;
      throw;
    }
    return;
  }
  Block* merged = cache_freed_block(block, ctx, EventKind::kFree, /*expandable_aware=*/true);
  if (policy_) {
    // The free is done: a policy's tidy-up that fails (std::bad_alloc, the
    // device refusing an unmap) leaves its pages cached, the state whole,
    // and must not reach the caller, whose block is gone now.
    try {
      PolicyEngine engine(*this, ctx);
      policy_->after_free(engine, merged);
    } catch (const std::exception&) {
      ++policy_failures_;
    }
  }
}

// native: malloc after get_free_block found nothing.
Block* DeviceCachingAllocator::reserve_segment(BlockPool& pool, StreamId stream, size_t size,
                                               size_t orig_size, const ContextPtr& ctx) {
  Request r;
  r.size = size;
  r.stream = stream;
  r.pool = &pool;
  r.alloc_size = segment_size_for(r.size, config_.large_segment_size);
  if (gc_active()) garbage_collect_cached_blocks(ctx);
  if (alloc_block(r, false, ctx)) return r.block;
  if (pools_.has_use_on_oom() && !pool.owner())
    if (Block* cached = take_use_on_oom_block(r)) return cached;
  // A policy that reclaimed what it could in on_miss has nothing to retry.
  if (policy_ && !policy_->retry_after_release()) raise_oom(r, orig_size, ctx);
  // Native empties the whole cache only while no private pool is routed to.
  const bool found = (release_available_cached_blocks(r, ctx) && alloc_block(r, false, ctx)) ||
                     (!pools_.routing() && release_cached_blocks(ctx) && alloc_block(r, true, ctx));
  if (!found) raise_oom(r, orig_size, ctx);
  return r.block;
}

bool DeviceCachingAllocator::would_hit_cache(size_t orig_size, StreamId stream) const {
  if (orig_size > kMaxRequestSize) return false;
  const size_t size = rounded_request(orig_size);
  // Lookups do not change the pool; pool_for just has no const overload.
  BlockPool& pool = const_cast<DeviceCachingAllocator&>(*this).pool_for(size);
  return !BlockPool::is_end(expandable_.empty()
                                ? find_free_block(pool, stream, size)
                                : expandable_.find_free_block(pool, stream, size, config_));
}

bool DeviceCachingAllocator::would_exceed_limit(size_t orig_size) const {
  if (orig_size > kMaxRequestSize) return true;
  const size_t size = rounded_request(orig_size);
  return limit_.refuses(reserved_bytes_, segment_size_for(size, config_.large_segment_size));
}

bool DeviceCachingAllocator::would_collect_garbage() const {
  if (!gc_active()) return false;
  const auto threshold = static_cast<size_t>(config_.garbage_collection_threshold *
                                             static_cast<double>(limit_.allowed_bytes()));
  return reserved_bytes_ > threshold;
}

// native: alloc_block
bool DeviceCachingAllocator::alloc_block(Request& r, bool is_retry,
                                         const ContextPtr& ctx) {
  if (is_retry) {
    EngineEvent e{EventKind::kAllocRetry};
    emit(e);
  }
  if (policy_) {
    PolicyEngine engine(*this, ctx);
    const MissRequest m{.size = r.size, .alloc_size = r.alloc_size, .stream = r.stream,
                        .pool = r.pool, .is_retry = is_retry};
    r.block = policy_->on_miss(engine, m);
    return r.block != nullptr;
  }
  return native_alloc_block(r, ctx);
}

bool DeviceCachingAllocator::native_alloc_block(Request& r, const ContextPtr& ctx) {
  const size_t size = r.alloc_size;
  // Native checks the limit with the whole-segment size even when it then
  // maps pages into an expandable segment (which may map more or less).
  if (limit_.refuses(reserved_bytes_, size)) return false;
  // A pool whose segments come from another allocator (MemPool(allocator=))
  // takes them from it even with expandable segments on, as native 2.11
  // does for such an "active" pool; every other pool maps pages.
  PrivatePool* const owner = r.pool->owner();
  if (expandable_.on() && !(owner && owner->segment_source)) {
    const RefreshAtExit refresh(*this);  // a new expandable segment
    r.block = expandable_.allocate(
        *r.pool, r.stream, r.size, config_, ctx,
        [this](const auto& change) { account_pages(change); },
        [this, &ctx](ExpandableSegment& seg, uintptr_t start, size_t bytes) {
          return policy_may_map(seg, start, bytes, ctx);
        });
    return r.block != nullptr;
  }
  // Host memory first: a std::bad_alloc here leaves nothing reserved on the
  // device. After the device call nothing below (nor alloc_found_block,
  // which takes the block next) may throw.
  Block* b = recycler_.take();  // a spare's placement fields are stale: set all
  try {
    segment_heads_.reserve_one();
    prepare_unindexed_block(*r.pool);
  } catch (...) {
    recycler_.give_back_unused(b);
    throw;
  }
  uintptr_t address = 0;
  try {
    address = segment_source(*r.pool).allocate(device_, size, r.stream);
  } catch (...) {
    recycler_.give_back_unused(b);
    throw;
  }
  if (address == 0) {
    recycler_.give_back_unused(b);
    return false;
  }

  reserved_bytes_ += size;
  if (owner) ++owner->segment_count;
  b->address = address;
  b->size = size;
  b->requested_size = 0;
  b->stream = r.stream;
  b->pool = r.pool;
  b->prev = nullptr;
  b->next = nullptr;
  b->gc_count_base = 0;
  b->context_when_segment_allocated = ctx;
  r.block = b;
  segment_heads_.insert(b);

  EngineEvent e = segment_event(EventKind::kSegmentAlloc, *r.pool, r.stream, address,
                                size, config_.max_split_size, &ctx);
  emit(e);
  return true;
}

void DeviceCachingAllocator::raise_oom(const Request& r, size_t orig_size,
                                       const ContextPtr& ctx) {
  const OomFacts f{.device = device_, .pool = kind_of(*r.pool), .stream = r.stream,
                   .rounded = r.size, .requested = orig_size, .allocation = r.alloc_size,
                   .reserved = reserved_bytes_, .allocated = allocated_bytes_};
  report_out_of_memory(f, backend_.memory_info(device_), limit_, ctx,
                       [this](EngineEvent& e) { emit(e); });
}

// native: free_block, for a block whose stream events have completed.
void DeviceCachingAllocator::free_block(Block* block, const ContextPtr& ctx) {
  cache_freed_block(block, ctx, EventKind::kFreeCompleted, /*expandable_aware=*/true);
}

void DeviceCachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw ConfigError("memory fraction must be in [0, 1], got " +
                      std::to_string(fraction));
  // As native 2.11: a fraction of 1.0 removes the limit (get_per_process_
  // memory_fraction then reads 1.0, and garbage collection, which acts only
  // under a limit, stops); 0.0 allows nothing.
  if (fraction < 1.0)
    limit_.set_fraction(fraction, backend_.memory_info(device_).total_bytes);
  else
    limit_.clear();
}

void DeviceCachingAllocator::set_memory_limit(size_t bytes) { limit_.set_bytes(bytes); }

size_t DeviceCachingAllocator::largest_cached_block() const {
  size_t largest = 0;
  auto scan = [&](const BlockPool& pool) {
    for (const auto& e : pool.entries()) largest = std::max(largest, e.size);
  };
  scan(large_blocks_);
  scan(small_blocks_);
  // Native's cacheInfo counts private pools' cached blocks too.
  pools_.for_each([&](const PrivatePool& p) {
    scan(p.large);
    scan(p.small);
  });
  return largest;
}

uintptr_t DeviceCachingAllocator::base_allocation(const Block* block,
                                                  size_t* segment_bytes) const {
  // Native's getBaseAllocation refuses these (their memory cannot be shared
  // by a cudaIpcMemHandle); the message is native's advice.
  if (block->expandable)
    throw InvalidPointerError(
        "Tensors allocated with expandable_segments:True cannot be shared between processes. "
        "Consider using expandable_segments:False in data loading workers via "
        "torch.cuda.memory._set_allocator_settings('expandable_segments:False')");
  while (block->prev) block = block->prev;
  const uintptr_t base = block->address;
  if (segment_bytes) {
    size_t total = 0;
    for (; block; block = block->next) total += block->size;
    *segment_bytes = total;
  }
  return base;
}

BlockPool& DeviceCachingAllocator::routed_pool(size_t rounded, StreamId stream) {
  if (PrivatePool* pool = pools_.routed(stream))
    return rounded <= kSmallSizeForPool ? pool->small : pool->large;
  return pool_for(rounded);
}

// Native routes the request to each use_on_oom pool in turn (adding and
// dropping a use) and only searches its cached blocks: no segment is
// reserved there. The search is the same best fit as malloc's. The block
// leaves its pool's index here; alloc_found_block indexes any remainder in
// the block's own pool.
Block* DeviceCachingAllocator::take_use_on_oom_block(const Request& r) {
  return pools_.first_use_on_oom([&](PrivatePool& pool) -> Block* {
    BlockPool& half = r.pool->is_small() ? pool.small : pool.large;
    BlockPool::iterator slot = get_free_block(half, r.stream, r.size);
    if (BlockPool::is_end(slot)) return nullptr;
    Block* block = slot->block;
    prepare_unindexed_block(half);  // before it leaves the index (erase keeps it)
    half.erase(slot);
    return block;
  });
}

void DeviceCachingAllocator::set_expandable_segments(bool on) {
  expandable_.set_on(on);
  large_blocks_.set_expandable_split(on);
  pools_.set_expandable_split(on);
  refresh_fast_path();
}

bool DeviceCachingAllocator::policy_may_map(ExpandableSegment& seg, uintptr_t start,
                                            size_t bytes, const ContextPtr& ctx) {
  if (!policy_) return true;
  PolicyEngine engine(*this, ctx);
  return policy_->before_map(engine, seg, start, bytes);
}

void DeviceCachingAllocator::account_pages(const ExpandableBlocks::PageChange& change) {
  if (change.kind == EventKind::kSegmentMap) reserved_bytes_ += change.bytes;
  else reserved_bytes_ -= change.bytes;
  EngineEvent e = segment_event(change.kind, *change.pool, change.stream, change.address,
                                change.bytes, config_.max_split_size, change.context);
  emit(e);
}

}  // namespace cachealloc
