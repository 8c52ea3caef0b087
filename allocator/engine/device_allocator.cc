// DeviceCachingAllocator outside the cache-hit path (which is
// device_allocator_hot.h): the out-of-line malloc and free, the miss with
// its OOM retries, limits, lookups and the invariant check over the parts.
// The order of checks, splits, merges and emitted events follows native
// PyTorch step for step; comments name the native function each piece
// mirrors.
#include "allocator/engine/device_allocator.h"

#include <algorithm>
#include <memory>
#include <string>

#include "allocator/base/errors.h"
#include "allocator/engine/blocks/size_policy.h"
#include "allocator/engine/observe/engine_events.h"

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
  fast_.set(FastPath::kPolicy, policy_ != nullptr);
  set_expandable_segments(config_.expandable_segments);
  if (config_.per_process_memory_fraction >= 0.0)
    set_memory_fraction(config_.per_process_memory_fraction);
}

// The parts go in reverse order: DeviceSegments deletes the Blocks of the
// segments still reserved (their memory is returned by the backend's owner).
DeviceCachingAllocator::~DeviceCachingAllocator() = default;

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

void DeviceCachingAllocator::refuse_size(size_t size) {
  throw SizeOverflowError("allocation of " + std::to_string(size) +
                          " bytes exceeds the largest supported request (" +
                          std::to_string(kMaxRequestSize) + " bytes)");
}

// native: malloc, out of line: with events to poll, expandable segments or
// a policy.
Block* DeviceCachingAllocator::malloc_slow(size_t orig_size, StreamId stream,
                                           const ContextPtr& ctx) {
  // Native leaves cross-stream frees pending while a private pool is routed
  // to (a CUDA graph may be capturing: no event may be queried then), except
  // those the capture's graph already orders before this stream's work.
  if (fast_.has(FastPath::kStreamWork)) {
    if (!fast_.routing()) events_.process(ctx);
    else if (config_.graph_capture_record_stream_reuse) events_.free_safe_in_capture(stream, ctx);
  }
  const size_t size = rounded_request(orig_size);
  BlockPool& pool = pool_for(size, stream);
  if (gc_active()) pool.count_search();
  if (!policy_) {
    BlockPool::iterator slot = segments_.find_cached(pool, stream, size);
    Block* block = found_or_reserved(pool, slot, stream, size, orig_size, ctx);
    return alloc_found_block(pool, block, slot, size, orig_size, ctx, SplitChoice::kByRule,
                             /*expandable_aware=*/true);
  }
  // The policy places the request (its find_cached and should_split); the
  // engine's miss path, whose alloc_block asks the policy's on_miss.
  PolicyEngine engine = policy_engine(ctx);
  BlockPool::iterator slot = policy_->find_cached(engine, pool, stream, size);
  Block* block = found_or_reserved(pool, slot, stream, size, orig_size, ctx);
  const SplitChoice choice =
      policy_->should_split(engine, block, size) ? SplitChoice::kSplit : SplitChoice::kWhole;
  return alloc_found_block(pool, block, slot, size, orig_size, ctx, choice,
                           /*expandable_aware=*/true);
}

void DeviceCachingAllocator::free_slow(Block* block, const ContextPtr& ctx) {
  if (!block->stream_uses.empty()) {
    try {
      events_.free_used_elsewhere(block, ctx);
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
      PolicyEngine engine = policy_engine(ctx);
      policy_->after_free(engine, merged);
    } catch (const std::exception&) {
      ++policy_failures_;
    }
  }
}

// native: malloc after get_free_block found nothing.
Block* DeviceCachingAllocator::reserve_segment(BlockPool& pool, StreamId stream, size_t size,
                                               size_t orig_size, const ContextPtr& ctx) {
  MissRequest r{.size = size,
                .alloc_size = segment_size_for(size, config_.large_segment_size),
                .stream = stream,
                .pool = &pool};
  if (gc_active()) release_.collect_garbage(ctx);
  if (Block* b = alloc_block(r, ctx)) return b;
  if (pools_.has_use_on_oom() && !pool.owner())
    if (Block* cached = take_use_on_oom_block(r)) return cached;
  // A policy that reclaimed what it could in on_miss has nothing to retry.
  if (policy_ && !policy_->retry_after_release()) raise_oom(r, orig_size, ctx);
  if (release_.release_oversize(pool, stream, size, ctx))
    if (Block* b = alloc_block(r, ctx)) return b;
  // Native empties the whole cache only while no private pool is routed to.
  if (!pools_.routing() && release_.release_cached(ctx)) {
    r.is_retry = true;
    if (Block* b = alloc_block(r, ctx)) return b;
  }
  raise_oom(r, orig_size, ctx);
}

bool DeviceCachingAllocator::would_hit_cache(size_t orig_size, StreamId stream) const {
  if (orig_size > kMaxRequestSize) return false;
  const size_t size = rounded_request(orig_size);
  // Lookups do not change the pool; pool_for just has no const overload.
  BlockPool& pool = const_cast<DeviceCachingAllocator&>(*this).pool_for(size);
  return !BlockPool::is_end(segments_.find_cached(pool, stream, size));
}

bool DeviceCachingAllocator::would_exceed_limit(size_t orig_size) const {
  if (orig_size > kMaxRequestSize) return true;
  const size_t size = rounded_request(orig_size);
  return segments_.limit().refuses(segments_.reserved_bytes(),
                                   segment_size_for(size, config_.large_segment_size));
}

// native: alloc_block
Block* DeviceCachingAllocator::alloc_block(const MissRequest& r, const ContextPtr& ctx) {
  if (r.is_retry) {
    EngineEvent e{EventKind::kAllocRetry};
    observers_.emit(e);
  }
  if (policy_) {
    PolicyEngine engine = policy_engine(ctx);
    return policy_->on_miss(engine, r);
  }
  return segments_.allocate(*r.pool, r.stream, r.size, r.alloc_size, ctx);
}

void DeviceCachingAllocator::raise_oom(const MissRequest& r, size_t orig_size,
                                       const ContextPtr& ctx) {
  const OomFacts f{.device = device_, .pool = kind_of(*r.pool), .stream = r.stream,
                   .rounded = r.size, .requested = orig_size, .allocation = r.alloc_size,
                   .reserved = segments_.reserved_bytes(), .allocated = allocated_bytes_};
  report_out_of_memory(f, backend_.memory_info(device_), segments_.limit(), ctx,
                       [this](EngineEvent& e) { observers_.emit(e); });
}

// native: free_block, for a block whose stream events have completed.
void DeviceCachingAllocator::free_block(Block* block, const ContextPtr& ctx) {
  cache_freed_block(block, ctx, EventKind::kFreeCompleted, /*expandable_aware=*/true);
}

PoolRestore DeviceCachingAllocator::restore_pool(const PoolCheckpoint& checkpoint,
                                                 const ContextPtr& ctx) {
  return checkpoints_.restore(
      checkpoint, [&](Block* block) { free(block, ctx); },
      [&](Block* block, size_t size, bool split) {
        BlockPool& owner = *block->pool;
        return alloc_found_block(owner, block, owner.find(block), size, size, ctx,
                                 split ? SplitChoice::kSplit : SplitChoice::kWhole,
                                 /*expandable_aware=*/true);
      });
}

void DeviceCachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw ConfigError("memory fraction must be in [0, 1], got " +
                      std::to_string(fraction));
  // As native 2.11: a fraction of 1.0 removes the limit (get_per_process_
  // memory_fraction then reads 1.0, and garbage collection, which acts only
  // under a limit, stops); 0.0 allows nothing.
  if (fraction < 1.0)
    segments_.limit().set_fraction(fraction, backend_.memory_info(device_).total_bytes);
  else
    segments_.limit().clear();
}

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
Block* DeviceCachingAllocator::take_use_on_oom_block(const MissRequest& r) {
  return pools_.first_use_on_oom([&](PrivatePool& pool) -> Block* {
    BlockPool& half = r.pool->is_small() ? pool.small : pool.large;
    BlockPool::iterator slot = get_free_block(half, r.stream, r.size);
    if (BlockPool::is_end(slot)) return nullptr;
    Block* block = slot->block;
    segments_.prepare_unindexed_block(half);  // before it leaves the index (erase keeps it)
    half.erase(slot);
    return block;
  });
}

void DeviceCachingAllocator::set_expandable_segments(bool on) {
  segments_.set_expandable(on);
  large_blocks_.set_expandable_split(on);
  pools_.set_expandable_split(on);
}

PolicyEngine DeviceCachingAllocator::policy_engine(const ContextPtr& ctx) {
  return PolicyEngine({.config = config_,
                       .segments = segments_,
                       .pools = pools_,
                       .small = small_blocks_,
                       .large = large_blocks_,
                       .allocated_bytes = allocated_bytes_,
                       .policy = *policy_},
                      ctx);
}

void DeviceCachingAllocator::check_invariants() const {
  pools_.check();
  size_t indexed_blocks = 0;
  auto check_index = [&](const BlockPool& pool) {
    if (std::string broken = pool.check_index(); !broken.empty())
      throw InvariantViolation("invariant broken: pool index: " + broken);
    indexed_blocks += pool.size();
  };
  check_index(large_blocks_);
  check_index(small_blocks_);
  pools_.for_each([&](const PrivatePool& p) {
    check_index(p.large);
    check_index(p.small);
  });
  DeviceSegments::Census census = segments_.check();
  if (census.free_blocks != indexed_blocks)
    throw InvariantViolation("pool index holds blocks that are in no segment");
  pools_.check_segment_counts(census.segments_of);
  events_.check(census.waiting, census.busy);
  if (fast_.has(FastPath::kPolicy) != (policy_ != nullptr))
    throw InvariantViolation("policy flag disagrees with the policy");
  if (census.allocated_bytes != allocated_bytes_)
    throw InvariantViolation("allocated bytes " + std::to_string(allocated_bytes_) +
                             " differ from the allocated blocks' total " +
                             std::to_string(census.allocated_bytes));
}

}  // namespace cachealloc
