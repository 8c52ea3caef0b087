// Private pools of DeviceCachingAllocator (PyTorch's MemPool): creation,
// use counts, routing of mallocs, and the use_on_oom fallback. What a pool
// is and how long it lives: private_pool.h. Releasing a freeable pool's
// segments is part of release_cached_blocks (cache_release.cc).
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "allocator/device_allocator.h"

namespace cachealloc {

namespace {
void refuse_default(PoolId id, const char* what) {
  if (id.is_default())
    throw std::invalid_argument(std::string(what) +
                                ": (0, 0) names the default pools, not a memory pool");
}
}  // namespace

PrivatePool& DeviceCachingAllocator::pool_named(PoolId id, const char* what) const {
  refuse_default(id, what);
  auto it = private_pools_.find(id);
  if (it == private_pools_.end())
    throw std::invalid_argument(std::string(what) + ": no memory pool " + id.to_string() +
                                " on device " + std::to_string(device_));
  return *it->second;
}

void DeviceCachingAllocator::create_or_incref_pool(PoolId id) {
  refuse_default(id, "create_or_incref_pool");
  auto it = private_pools_.find(id);
  if (it == private_pools_.end()) {
    auto pool = std::make_unique<PrivatePool>(id);  // use count 1
    pool->large.set_expandable_split(expandable_on_);
    private_pools_.emplace(id, std::move(pool));
    return;
  }
  PrivatePool& pool = *it->second;
  // Native asserts this: ids are never reused, so a freeable pool is only
  // waiting for its segments to be returned.
  if (pool.use_count == 0)
    throw std::invalid_argument("create_or_incref_pool: memory pool " + id.to_string() +
                                " was released and cannot be used again");
  ++pool.use_count;
}

void DeviceCachingAllocator::begin_allocate_to_pool(PoolId id, PoolFilter filter) {
  refuse_default(id, "begin_allocate_to_pool");
  if (!filter) throw std::invalid_argument("begin_allocate_to_pool: no filter");
  for (const auto& [pool, f] : routes_)
    if (pool->id == id)
      throw std::invalid_argument("begin_allocate_to_pool: already allocating to memory pool " +
                                  id.to_string());
  routes_.reserve(routes_.size() + 1);  // the one step that can throw, before any change
  create_or_incref_pool(id);
  routes_.emplace_back(private_pools_.find(id)->second.get(), std::move(filter));
  routing_ = true;
}

void DeviceCachingAllocator::end_allocate_to_pool(PoolId id) {
  refuse_default(id, "end_allocate_to_pool");
  auto it = std::find_if(routes_.begin(), routes_.end(),
                         [&](const auto& route) { return route.first->id == id; });
  if (it == routes_.end())
    throw std::invalid_argument("end_allocate_to_pool: not allocating to memory pool " +
                                id.to_string());
  routes_.erase(it);
  routing_ = !routes_.empty();
}

void DeviceCachingAllocator::release_pool(PoolId id) {
  PrivatePool& pool = pool_named(id, "release_pool");
  if (pool.use_count == 0)
    throw std::invalid_argument("release_pool: memory pool " + id.to_string() +
                                " was released already");
  freeable_pools_.reserve(freeable_pools_.size() + 1);  // before any change
  if (--pool.use_count == 0) freeable_pools_.push_back(&pool);
}

int DeviceCachingAllocator::pool_use_count(PoolId id) const {
  return pool_named(id, "pool_use_count").use_count;
}

void DeviceCachingAllocator::set_use_on_oom(PoolId id, bool use_on_oom) {
  refuse_default(id, "set_use_on_oom");
  auto it = std::find(use_on_oom_pools_.begin(), use_on_oom_pools_.end(), id);
  if (use_on_oom && it == use_on_oom_pools_.end()) use_on_oom_pools_.push_back(id);
  if (!use_on_oom && it != use_on_oom_pools_.end()) use_on_oom_pools_.erase(it);
}

void DeviceCachingAllocator::set_no_split(PoolId id) {
  PrivatePool& pool = pool_named(id, "set_no_split");
  pool.large.set_no_split();
  pool.small.set_no_split();
}

BlockPool& DeviceCachingAllocator::routed_pool(size_t rounded, StreamId stream) {
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->second(stream)) {
      PrivatePool& pool = *it->first;
      return rounded <= kSmallSizeForPool ? pool.small : pool.large;
    }
  }
  return pool_for(rounded);
}

// Native routes the request to each use_on_oom pool in turn (adding and
// dropping a use) and only searches its cached blocks: no segment is
// reserved there. The search is the same best fit as malloc's. The block
// leaves its pool's index here; alloc_found_block indexes any remainder in
// the block's own pool.
Block* DeviceCachingAllocator::take_use_on_oom_block(const Request& r) {
  for (const PoolId& id : use_on_oom_pools_) {
    auto it = private_pools_.find(id);
    if (it == private_pools_.end()) continue;
    PrivatePool& pool = *it->second;
    BlockPool& half = r.pool->is_small() ? pool.small : pool.large;
    BlockPool::iterator slot = get_free_block(half, r.stream, r.size);
    if (BlockPool::is_end(slot)) continue;
    Block* block = slot->block;
    half.erase(slot);
    return block;
  }
  return nullptr;
}

}  // namespace cachealloc
