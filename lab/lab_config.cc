#include "lab/lab_config.h"

#include <vector>

#include "allocator/base/errors.h"
#include "allocator/policy/policy_registry.h"

namespace cachealloc {
namespace {

std::string trim(std::string_view s) {
  const size_t first = s.find_first_not_of(' ');
  if (first == std::string_view::npos) return "";
  const size_t last = s.find_last_not_of(' ');
  return std::string(s.substr(first, last - first + 1));
}

// Top-level comma-separated entries; commas inside [...] (roundup lists)
// do not split.
std::vector<std::string> entries_of(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    else if (c == ']') --depth;
    else if (c == ',' && depth <= 0) {
      out.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

std::string LabConfig::label() const {
  if (text == "trace") return config.source.empty() ? "trace (defaults)" : "trace (" + config.source + ")";
  if (trim(text).empty()) return "defaults";
  return text;
}

LabConfig parse_lab_config(std::string_view text, const AllocatorConfig& recorded,
                           std::string_view policy) {
  LabConfig c;
  c.text = std::string(text);
  check_policy_name(policy);
  c.policy = policy.empty() ? "native" : std::string(policy);
  if (trim(text) == "trace") {
    c.config = recorded;
    return c;
  }
  std::string native;
  bool policy_seen = false;
  for (const std::string& entry : entries_of(text)) {
    if (entry.rfind("policy", 0) == 0) {
      const size_t colon = entry.find(':');
      const std::string key = trim(entry.substr(0, colon));
      if (key == "policy") {
        const std::string name = colon == std::string::npos ? "" : trim(entry.substr(colon + 1));
        if (policy_seen) throw ConfigError("lab config '" + c.text + "': policy given twice");
        policy_seen = true;
        if (name == "expandable")
          throw ConfigError("lab config '" + c.text +
                            "': policy:expandable (the lab's emulation) is retired; "
                            "use expandable_segments:True, native's own");
        try {
          check_policy_name(name);
        } catch (const ConfigError& e) {
          throw ConfigError("lab config '" + c.text + "': " + e.what());
        }
        c.policy = name;
        continue;
      }
    }
    if (!entry.empty()) native += (native.empty() ? "" : ",") + entry;
  }
  c.config = AllocatorConfig::parse(native);
  if (c.config.per_process_memory_fraction >= 0.0)
    throw ConfigError("lab config '" + c.text +
                      "': per_process_memory_fraction is not used by the lab; "
                      "pass --memory-limit BYTES instead");
  if (c.config.backend != BackendKind::kNative)
    throw ConfigError("lab config '" + c.text + "': only the native backend can be replayed");
  return c;
}

}  // namespace cachealloc
