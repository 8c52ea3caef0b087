// The allocation and free paths of ExpandableSegmentsAllocator. Comments
// name the PyTorch function each piece mirrors (expandable_segments:True).
#include "lab/expandable_allocator.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "allocator/errors.h"
#include "allocator/oom_report.h"
#include "allocator/size_policy.h"
#include "allocator/stream_event_queues.h"

namespace cachealloc {
namespace {

// Virtual ranges start here, far from SimulatedDevice's physical addresses
// (0x7f0000000000), so a segment address is never mistaken for a page.
constexpr uintptr_t kVirtualBase = uintptr_t{0x200000000000};
constexpr size_t kVirtualAlignment = size_t{1} << 30;  // ranges start on 1 GiB

bool allocatable(const Block* b) {
  return b && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
}

}  // namespace

ExpandableSegmentsAllocator::ExpandableSegmentsAllocator(int device,
                                                         const AllocatorConfig& config,
                                                         DeviceBackend& backend)
    : device_(device),
      config_(config),
      backend_(backend),
      device_capacity_(backend.memory_info(device).total_bytes),
      next_virtual_base_(kVirtualBase) {
  if (config_.per_process_memory_fraction >= 0.0)
    throw ConfigError("expandable segments policy: per_process_memory_fraction is not "
                      "supported here; set a memory limit instead");
  if (config_.backend != BackendKind::kNative)
    throw ConfigError("expandable segments policy: only the native backend applies");
}

ExpandableSegmentsAllocator::~ExpandableSegmentsAllocator() {
  // Pages still mapped belong to the backend's owner (as in the native
  // engine); only the bookkeeping is freed here.
  std::vector<Block*> all;
  for (BlockPool* pool : {&large_blocks_, &small_blocks_, &large_unmapped_, &small_unmapped_})
    for (const auto& e : pool->entries()) all.push_back(e.block);
  all.insert(all.end(), active_blocks_.begin(), active_blocks_.end());
  for (Block* b : all) delete b;
  for (Block* b : spare_blocks_) delete b;
}

Block* ExpandableSegmentsAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  return b;
}

void ExpandableSegmentsAllocator::delete_block(Block* block) {
  *block = Block();
  if (spare_blocks_.size() < 4096) spare_blocks_.push_back(block);
  else delete block;
}

void ExpandableSegmentsAllocator::emit_mapping(EngineEventKind kind, const VirtualSegment& seg,
                                               uintptr_t address, size_t bytes,
                                               const ContextPtr* context) {
  EngineEvent e{kind};
  e.pool = seg.is_small ? PoolKind::kSmall : PoolKind::kLarge;
  e.stream = seg.stream;
  e.address = address;
  e.size = bytes;
  e.oversize = oversize(bytes);
  e.context = context;
  emit(e);
}

ExpandableSegmentsAllocator::VirtualSegment& ExpandableSegmentsAllocator::segment_of(
    const Block* b) {
  auto it = segments_.upper_bound(b->address);
  return *std::prev(it)->second;
}

const ExpandableSegmentsAllocator::VirtualSegment& ExpandableSegmentsAllocator::segment_of(
    const Block* b) const {
  auto it = segments_.upper_bound(b->address);
  return *std::prev(it)->second;
}

Block* ExpandableSegmentsAllocator::malloc(size_t orig_size, StreamId stream,
                                           const ContextPtr& ctx) {
  if (orig_size > kMaxRequestSize)
    throw SizeOverflowError("allocation of " + std::to_string(orig_size) +
                            " bytes exceeds the largest supported request (" +
                            std::to_string(kMaxRequestSize) + " bytes)");
  process_events(ctx);
  Request r;
  r.size = round_request_size(orig_size, config_);
  r.stream = stream;
  r.pool = &mapped_pool(is_small_request(r.size));
  const bool found = get_free_block(r) || alloc_block(r, false, ctx) ||
                     (release_cached_blocks(ctx) && alloc_block(r, true, ctx));
  if (!found) raise_oom(r, orig_size, ctx);
  return alloc_found_block(r, orig_size, ctx);
}

// native: get_free_block, expandable branch. Best fit judges a block by the
// size it can grow to (itself plus the unmapped range right after it), so
// the growing tail of a segment is kept for requests nothing else fits.
bool ExpandableSegmentsAllocator::get_free_block(Request& r) {
  BlockPool& pool = *r.pool;
  auto it = pool.lower_bound(r.stream, r.size);
  if (it == pool.end() || it->stream != r.stream) return false;
  auto expandable_size = [this](const Block* b) {
    return b->size + (b->next && !is_mapped(b->next) ? b->next->size : 0);
  };
  for (auto next = std::next(it); next != pool.end() && next->stream == r.stream &&
                                  expandable_size(next->block) < expandable_size(it->block);
       ++next)
    it = next;
  if (r.size < config_.max_split_size && it->size >= config_.max_split_size) return false;
  if (r.size >= config_.max_split_size &&
      it->size >= r.size + config_.max_non_split_rounding_size)
    return false;
  r.block = it->block;
  pool.erase(it);
  return true;
}

// native: alloc_block -> try_allocate_expandable_block. Maps just enough
// pages after the chosen free block (or at the start of an unmapped range).
bool ExpandableSegmentsAllocator::alloc_block(Request& r, bool is_retry,
                                              const ContextPtr& ctx) {
  if (is_retry) {
    EngineEvent e{EngineEventKind::kAllocRetry};
    emit(e);
  }
  Block* candidate = find_expandable_block(r);
  // candidate: unmapped [-> free -> ...], or free -> unmapped -> ...
  if (!is_mapped(candidate) && !map_block(candidate, std::min(candidate->size, r.size), ctx))
    return false;
  while (candidate->size < r.size) {
    // free -> unmapped: mapping the front of `next` merges `candidate` into it.
    Block* next = candidate->next;
    if (!map_block(next, std::min(r.size - candidate->size, next->size), ctx)) return false;
    candidate = next;
  }
  r.pool->erase(candidate);
  r.block = candidate;
  return true;
}

// native: find_expandable_block. The first unmapped range of the stream (by
// size, then address) that, with the free block before it, has room; else a
// new segment.
Block* ExpandableSegmentsAllocator::find_expandable_block(const Request& r) {
  const bool small = r.pool->is_small();
  BlockPool& unmapped = unmapped_pool(small);
  auto has_room = [&](const Block* b) {
    size_t bytes = 0;
    for (; bytes < r.size && allocatable(b); b = b->next) bytes += b->size;
    return bytes >= r.size;
  };
  for (auto it = unmapped.lower_bound(r.stream, 0);
       it != unmapped.end() && it->stream == r.stream; ++it) {
    Block* c = it->block;
    if (allocatable(c->prev)) c = c->prev;
    if (has_room(c)) return c;
  }
  auto segment = std::make_unique<VirtualSegment>();
  segment->page_bytes = small ? kSmallPageBytes : kLargePageBytes;
  const size_t span = device_capacity_ + device_capacity_ / 8;
  segment->page_count = (span + segment->page_bytes - 1) / segment->page_bytes;
  segment->base = next_virtual_base_;
  segment->stream = r.stream;
  segment->is_small = small;
  next_virtual_base_ += (segment->bytes() + kVirtualAlignment - 1) / kVirtualAlignment *
                        kVirtualAlignment;
  Block* b = new_block();
  b->address = segment->base;
  b->size = segment->bytes();
  b->stream = r.stream;
  b->pool = &unmapped;
  unmapped.insert(b);
  segments_.emplace(segment->base, std::move(segment));
  return b;
}

// native: map_block. Maps the pages covering the first `size` bytes of the
// unmapped block `to_map`, which becomes a free mapped block (merged with
// free mapped neighbours); the rest stays unmapped. False, with nothing
// changed, if the limit or the device refuses.
bool ExpandableSegmentsAllocator::map_block(Block* to_map, size_t size,
                                            const ContextPtr& ctx) {
  VirtualSegment& seg = segment_of(to_map);
  const size_t first = (to_map->address - seg.base) / seg.page_bytes;
  const size_t last = (to_map->address + size - seg.base + seg.page_bytes - 1) / seg.page_bytes;
  const size_t bytes = (last - first) * seg.page_bytes;
  if (limit_.refuses(reserved_bytes_, bytes)) return false;
  for (size_t p = first; p < last; ++p) {
    const uintptr_t page = backend_.allocate(device_, seg.page_bytes, seg.stream);
    if (page == 0) {
      for (size_t q = first; q < p; ++q) {
        backend_.release(device_, seg.pages.at(q), seg.page_bytes);
        seg.pages.erase(q);
      }
      return false;
    }
    seg.pages.emplace(p, page);
  }
  BlockPool& unmapped = *to_map->pool;
  unmapped.erase(to_map);
  // [to_map | remaining (unmapped)]
  if (bytes < to_map->size) unmapped.insert(split_off_tail(to_map, bytes, unmapped));
  const uintptr_t mapped_at = to_map->address;
  to_map->pool = &mapped_pool(seg.is_small);
  try_merge_blocks(to_map, to_map->prev);
  try_merge_blocks(to_map, to_map->next);
  to_map->pool->insert(to_map);
  if (!to_map->prev && !to_map->context_when_segment_allocated)
    to_map->context_when_segment_allocated = ctx;
  reserved_bytes_ += bytes;
  emit_mapping(EngineEventKind::kSegmentAlloc, seg, mapped_at, bytes, &ctx);
  return true;
}

// native: alloc_found_block. With expandable segments any remainder of at
// least 512 bytes is split off (native's should_split).
Block* ExpandableSegmentsAllocator::alloc_found_block(Request& r, size_t orig_size,
                                                      const ContextPtr& ctx) {
  Block* block = r.block;
  if (block->size - r.size >= kMinBlockSize) {  // [block | remaining]
    // The front is handed out, so the found block, already out of the
    // pool, is re-indexed as the remainder. r.block lies in r.pool, on
    // r.stream (a segment's blocks share both).
    Block* remaining = block;
    block = split_off_front(remaining, r.size, *r.pool);
    r.pool->insert(remaining);
  }
  block->allocated = true;
  block->requested_size = orig_size;
  block->context_when_allocated = ctx;
  active_blocks_.insert(block);

  // Native keeps expandable blocks out of the inactive_split statistics:
  // whole free pages can always be given back.
  EngineEvent e{EngineEventKind::kAlloc};
  e.pool = block->pool->is_small() ? PoolKind::kSmall : PoolKind::kLarge;
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = orig_size;
  e.oversize = oversize(block->size);
  e.context = &ctx;
  emit(e);
  return block;
}

void ExpandableSegmentsAllocator::raise_oom(const Request& r, size_t orig_size,
                                            const ContextPtr& ctx) {
  OomFacts f;
  f.device = device_;
  f.pool = r.pool->is_small() ? PoolKind::kSmall : PoolKind::kLarge;
  f.stream = r.stream;
  f.rounded = r.size;
  f.requested = orig_size;
  f.allocation = r.size;
  f.reserved = reserved_bytes_;
  for (const Block* b : active_blocks_)
    if (b->allocated) f.allocated += b->size;
  report_out_of_memory(f, backend_.memory_info(device_), limit_, ctx,
                       [this](EngineEvent& e) { emit(e); });
}

// native: free
void ExpandableSegmentsAllocator::free(Block* block, const ContextPtr& ctx) {
  block->allocated = false;
  EngineEvent e{EngineEventKind::kFreeRequested};
  e.pool = block->pool->is_small() ? PoolKind::kSmall : PoolKind::kLarge;
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = block->requested_size;
  e.oversize = oversize(block->size);
  e.context = ctx ? &ctx : &block->context_when_allocated;
  emit(e);
  if (!block->stream_uses.empty()) insert_events(block);
  else free_block(block, ctx);
}

// native: free_block. Merges with free mapped neighbours only.
void ExpandableSegmentsAllocator::free_block(Block* block, const ContextPtr& ctx) {
  EngineEvent e{EngineEventKind::kFreeCompleted};
  e.pool = block->pool->is_small() ? PoolKind::kSmall : PoolKind::kLarge;
  e.stream = block->stream;
  e.address = block->address;
  e.size = block->size;
  e.requested = block->requested_size;
  ContextPtr allocated_ctx = std::move(block->context_when_allocated);
  e.context = ctx ? &ctx : &allocated_ctx;
  try_merge_blocks(block, block->prev);
  try_merge_blocks(block, block->next);
  active_blocks_.erase(block);
  block->pool->insert(block);
  emit(e);
}

// native: try_merge_blocks. Merges `src` into `dst` when src is free and of
// the same kind (mapped free with mapped, unmapped with unmapped: their
// pools are equal). Returns the bytes absorbed.
size_t ExpandableSegmentsAllocator::try_merge_blocks(Block* dst, Block* src) {
  if (!src || !src->is_free() || src->pool != dst->pool) return 0;
  src->pool->erase(src);
  if (dst->prev == src) {  // [src dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    dst->context_when_segment_allocated = std::move(src->context_when_segment_allocated);
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const size_t subsumed = src->size;
  dst->size += subsumed;
  delete_block(src);
  return subsumed;
}

Block* ExpandableSegmentsAllocator::split_off_tail(Block* block, size_t keep_bytes,
                                                   BlockPool& tail_pool) {
  Block* tail = new_block();
  tail->address = block->address + keep_bytes;
  tail->size = block->size - keep_bytes;
  tail->stream = block->stream;
  tail->pool = &tail_pool;
  tail->prev = block;
  tail->next = block->next;
  if (tail->next) tail->next->prev = tail;
  block->next = tail;
  block->size = keep_bytes;
  return tail;
}

Block* ExpandableSegmentsAllocator::split_off_front(Block* block, size_t front_bytes,
                                                    BlockPool& front_pool) {
  Block* front = new_block();
  front->address = block->address;
  front->size = front_bytes;
  front->stream = block->stream;
  front->pool = &front_pool;
  front->prev = block->prev;
  if (front->prev) front->prev->next = front;
  front->next = block;
  front->context_when_segment_allocated = std::move(block->context_when_segment_allocated);
  block->prev = front;
  block->address += front_bytes;
  block->size -= front_bytes;
  return front;
}

void ExpandableSegmentsAllocator::record_stream(Block* block, StreamId stream) {
  add_stream_use(block, stream);
}

}  // namespace cachealloc
