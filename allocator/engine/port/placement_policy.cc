// The default hooks of PlacementPolicy: native's decisions, through the
// engine's own functions (PolicyEngine), so a policy that overrides one
// hook keeps native's behaviour in every other.
#include "allocator/engine/port/placement_policy.h"

#include "allocator/engine/port/policy_engine.h"

namespace cachealloc {

BlockPool::iterator PlacementPolicy::find_cached(PolicyEngine& engine, BlockPool& pool,
                                                 StreamId stream, size_t size) {
  return engine.native_find_cached(pool, stream, size);
}

bool PlacementPolicy::should_split(PolicyEngine& engine, const Block* block, size_t size) {
  return engine.native_should_split(block, size);
}

Block* PlacementPolicy::on_miss(PolicyEngine& engine, const MissRequest& r) {
  return engine.native_alloc(r);
}

}  // namespace cachealloc
