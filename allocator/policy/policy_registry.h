// Placement policies by name: how the lab (--policy), the runtime
// (CACHEALLOC_POLICY, install(policy=)) and the A/B harness choose one.
//
//   native         the engine's own decisions (PyTorch 2.11's), no policy
//                  object: classic or expandable as the config says
//   stitch         cachealloc's page-reusing policy (stitch_policy.h)
//   unmap_on_free  the example of docs/policies.md (unmap_on_free_policy.h)
//
// A new policy: a class (placement_policy.h) and one line in
// policy_registry.cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/engine/port/placement_policy.h"

namespace cachealloc {

// The known names, "native" first.
const std::vector<std::string>& policy_names();
// Whether `name` is a known policy ("" counts as native).
bool is_policy_name(std::string_view name);
// The one check of a policy name: throws ConfigError for an unknown name,
// "unknown policy 'NAME': known policies are native, ...".
void check_policy_name(std::string_view name);
// A fresh policy object for one engine; null for "native" (and ""). Throws
// as check_policy_name for an unknown name.
std::unique_ptr<PlacementPolicy> make_policy(std::string_view name);

}  // namespace cachealloc
