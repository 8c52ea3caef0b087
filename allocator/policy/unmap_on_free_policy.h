// "unmap_on_free": the example policy of docs/policies.md. Native's
// expandable segments, except that a freed block's whole pages are unmapped
// at once instead of staying cached: reserved memory is as low as pages
// allow, at the price of a device call per free (and a map per miss).
// One hook (after_free) and one config change; every other decision is
// native's.
#pragma once

#include "allocator/engine/port/placement_policy.h"

namespace cachealloc {

class UnmapOnFreePolicy : public PlacementPolicy {
 public:
  std::string_view name() const override { return "unmap_on_free"; }
  // Pages are needed to unmap: expandable segments on.
  void shape_config(AllocatorConfig& config) const override { config.expandable_segments = true; }
  void after_free(PolicyEngine& engine, Block* merged) override;
};

}  // namespace cachealloc
