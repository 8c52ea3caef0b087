#include "allocator/policy/unmap_on_free_policy.h"

#include "allocator/policy/policy_engine.h"

namespace cachealloc {

void UnmapOnFreePolicy::after_free(PolicyEngine& engine, Block* merged) {
  // Private pools keep their memory (a graph replays into it).
  if (merged->pool->owner() || !merged->expandable) return;
  const ExpandableSegment* seg = engine.segment_of(merged->address);
  if (PolicyEngine::whole_page_bytes(*seg, merged->address, merged->size) > 0)
    engine.unmap_free_pages(merged);
}

}  // namespace cachealloc
