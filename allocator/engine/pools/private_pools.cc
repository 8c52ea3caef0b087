// Private pools (private_pools.h): creation, use counts, routes, the
// use_on_oom list, and their invariant check. The engine's steps that
// consult them (routing a malloc, the use_on_oom fallback) are in
// device_allocator.cc; releasing a freeable pool's segments is
// CacheRelease's (cache_release.h); checkpoints are PoolCheckpoints'.
#include "allocator/engine/pools/private_pools.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "allocator/base/errors.h"

namespace cachealloc {

namespace {
void refuse_default(PoolId id, const char* what) {
  if (id.is_default())
    throw std::invalid_argument(std::string(what) +
                                ": (0, 0) names the default pools, not a memory pool");
}
}  // namespace

PrivatePool& PrivatePools::named(PoolId id, const char* what) const {
  refuse_default(id, what);
  auto it = pools_.find(id);
  if (it == pools_.end())
    throw std::invalid_argument(std::string(what) + ": no memory pool " + id.to_string() +
                                " on device " + std::to_string(device_));
  return *it->second;
}

void PrivatePools::create_or_incref(PoolId id, std::shared_ptr<SegmentSource> source) {
  refuse_default(id, "create_or_incref_pool");
  auto it = pools_.find(id);
  if (it == pools_.end()) {
    auto pool = std::make_unique<PrivatePool>(id, std::move(source));  // use count 1
    pool->large.set_expandable_split(expandable_split_);
    pools_.emplace(id, std::move(pool));
    return;
  }
  PrivatePool& pool = *it->second;
  // Native asserts this too: a pool's allocator is fixed when it is made.
  if (source)
    throw std::invalid_argument("create_or_incref_pool: memory pool " + id.to_string() +
                                " exists already; an allocator can be given only when a "
                                "pool is created");
  // Native asserts this: ids are never reused, so a freeable pool is only
  // waiting for its segments to be returned.
  if (pool.use_count == 0)
    throw std::invalid_argument("create_or_incref_pool: memory pool " + id.to_string() +
                                " was released and cannot be used again");
  ++pool.use_count;
}

void PrivatePools::begin_route(PoolId id, PoolFilter filter) {
  refuse_default(id, "begin_allocate_to_pool");
  if (!filter) throw std::invalid_argument("begin_allocate_to_pool: no filter");
  for (const auto& [pool, f] : routes_)
    if (pool->id == id)
      throw std::invalid_argument("begin_allocate_to_pool: already allocating to memory pool " +
                                  id.to_string());
  routes_.reserve(routes_.size() + 1);  // the one step that can throw, before any change
  create_or_incref(id);
  routes_.emplace_back(pools_.find(id)->second.get(), std::move(filter));
  fast_.set_routing(true);
}

void PrivatePools::end_route(PoolId id) {
  refuse_default(id, "end_allocate_to_pool");
  auto it = std::find_if(routes_.begin(), routes_.end(),
                         [&](const auto& route) { return route.first->id == id; });
  if (it == routes_.end())
    throw std::invalid_argument("end_allocate_to_pool: not allocating to memory pool " +
                                id.to_string());
  routes_.erase(it);
  fast_.set_routing(routing());
}

void PrivatePools::release(PoolId id) {
  PrivatePool& pool = named(id, "release_pool");
  if (pool.use_count == 0)
    throw std::invalid_argument("release_pool: memory pool " + id.to_string() +
                                " was released already");
  freeable_.reserve(freeable_.size() + 1);  // before any change
  if (--pool.use_count == 0) freeable_.push_back(&pool);
}

void PrivatePools::set_use_on_oom(PoolId id, bool use_on_oom) {
  refuse_default(id, "set_use_on_oom");
  auto it = std::find(use_on_oom_.begin(), use_on_oom_.end(), id);
  if (use_on_oom && it == use_on_oom_.end()) use_on_oom_.push_back(id);
  if (!use_on_oom && it != use_on_oom_.end()) use_on_oom_.erase(it);
}

void PrivatePools::set_no_split(PoolId id) {
  PrivatePool& pool = named(id, "set_no_split");
  pool.large.set_no_split();
  pool.small.set_no_split();
}

void PrivatePools::set_expandable_split(bool on) {
  expandable_split_ = on;
  for (auto& [id, pool] : pools_) pool->large.set_expandable_split(on);
}

void PrivatePools::check() const {
  for (const auto& [id, p] : pools_) {
    if (p->use_count < 0) throw InvariantViolation("pool " + id.to_string() + ": use count < 0");
    const bool listed = std::find(freeable_.begin(), freeable_.end(), p.get()) != freeable_.end();
    if (listed != (p->use_count == 0))
      throw InvariantViolation("pool " + id.to_string() +
                               ": freeable list disagrees with its use count");
  }
  if (freeable_.size() > pools_.size())
    throw InvariantViolation("freeable list holds a pool that does not exist");
  for (const auto& [pool, filter] : routes_) {
    auto it = pools_.find(pool->id);
    if (it == pools_.end() || it->second.get() != pool)
      throw InvariantViolation("a route points at a pool that does not exist");
  }
  if (fast_.routing() != routing())
    throw InvariantViolation("routing flag disagrees with the routes");
}

void PrivatePools::check_segment_counts(
    const absl::flat_hash_map<const PrivatePool*, int>& segments_of) const {
  for (const auto& [id, p] : pools_) {
    auto it = segments_of.find(p.get());
    const int held = it == segments_of.end() ? 0 : it->second;
    if (p->segment_count != held)
      throw InvariantViolation("pool " + id.to_string() + " counts " +
                               std::to_string(p->segment_count) + " segments but holds " +
                               std::to_string(held));
  }
}

}  // namespace cachealloc
