#include "allocator/policy/unmap_on_free_policy.h"

#include "allocator/engine/port/policy_engine.h"

namespace cachealloc {

void UnmapOnFreePolicy::after_free(PolicyEngine& engine, Block* merged) {
  // Private pools keep their memory (a graph replays into it).
  // While a graph may be capturing, nothing is unmapped (it waits for a
  // stream); those pages go at a later free or empty_cache.
  if (merged->pool->owner() || !merged->expandable || engine.routing()) return;
  const ExpandableSegment* seg = engine.segment_of(merged->address);
  if (PolicyEngine::whole_page_bytes(*seg, merged->address, merged->size) > 0)
    engine.unmap_free_pages(merged);
}

}  // namespace cachealloc
