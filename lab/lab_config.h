// What a fragmentation-lab replay runs under: an allocator policy plus the
// native options, parsed from one config text.
//
//   "trace"                            the trace's recorded allocator_settings
//   ""                                 native defaults
//   "max_split_size_mb:128,..."        PYTORCH_CUDA_ALLOC_CONF syntax
//   "expandable_segments:True,..."     native's expandable segments
//   "policy:NAME[,options...]"         a placement policy by name
//                                      (allocator/policy/policy_registry.h:
//                                      native, stitch, unmap_on_free)
//
// The commands' --policy NAME is the policy of every config that names
// none; a config's own "policy:" wins.
//
// "policy:expandable" named the lab's emulation of expandable segments,
// retired once the engine ran native's own (issue 27): it is refused with
// a message that says so.
//
// "policy" is the lab's own key: AllocatorConfig::parse never sees it, so
// the plugin and the C API cannot be configured with it.
#pragma once

#include <string>
#include <string_view>

#include "allocator/config/config.h"

namespace cachealloc {

struct LabConfig {
  std::string text;  // as given
  // The placement policy the replay's engine runs (policy_registry.h).
  std::string policy = "native";
  AllocatorConfig config;  // native options in force
  // For tables and charts: the text, "defaults" for "", and for "trace" the
  // recorded config's text ("trace (max_split_size_mb:128)").
  std::string label() const;
};

// Parses `text` (see above); `recorded` is the trace's config, used for
// "trace"; `policy` is the policy when the text names none. Throws
// ConfigError for an unknown policy (naming the known ones), a bad native
// option, or an option the lab cannot honour (per_process_memory_fraction:
// use a memory limit; backend:cudaMallocAsync).
LabConfig parse_lab_config(std::string_view text, const AllocatorConfig& recorded,
                           std::string_view policy = "native");

}  // namespace cachealloc
