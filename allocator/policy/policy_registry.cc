#include "allocator/policy/policy_registry.h"

#include <functional>
#include <utility>

#include "allocator/base/errors.h"
#include "allocator/policy/rescue_policy.h"
#include "allocator/policy/stitch_policy.h"
#include "allocator/policy/unmap_on_free_policy.h"

namespace cachealloc {
namespace {

using Factory = std::function<std::unique_ptr<PlacementPolicy>()>;

// "native" is listed, and makes no object (the engine's inline path).
const std::vector<std::pair<std::string, Factory>>& registry() {
  static const auto* const table = new std::vector<std::pair<std::string, Factory>>{
      {"native", [] { return nullptr; }},
      {"stitch", [] { return std::make_unique<StitchPolicy>(); }},
      {"rescue", [] { return std::make_unique<RescuePolicy>(); }},
      {"unmap_on_free", [] { return std::make_unique<UnmapOnFreePolicy>(); }},
  };
  return *table;
}

}  // namespace

const std::vector<std::string>& policy_names() {
  static const auto* const names = [] {
    auto* v = new std::vector<std::string>;
    for (const auto& [name, factory] : registry()) v->push_back(name);
    return v;
  }();
  return *names;
}

bool is_policy_name(std::string_view name) {
  if (name.empty()) return true;
  for (const auto& [known, factory] : registry())
    if (known == name) return true;
  return false;
}

void check_policy_name(std::string_view name) {
  if (is_policy_name(name)) return;
  std::string list;
  for (const std::string& n : policy_names()) list += (list.empty() ? "" : ", ") + n;
  throw ConfigError("unknown policy '" + std::string(name) + "': known policies are " + list);
}

std::unique_ptr<PlacementPolicy> make_policy(std::string_view name) {
  check_policy_name(name);
  if (name.empty()) return nullptr;
  for (const auto& [known, factory] : registry())
    if (known == name) return factory();
  return nullptr;  // not reached: check_policy_name knows every name
}

}  // namespace cachealloc
