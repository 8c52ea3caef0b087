// What a fragmentation-lab replay runs under: an allocator policy plus the
// native options, parsed from one config text.
//
//   "trace"                            the trace's recorded allocator_settings
//   ""                                 native defaults
//   "max_split_size_mb:128,..."        PYTORCH_CUDA_ALLOC_CONF syntax
//   "policy:expandable[,options...]"   expandable segments (lab only,
//                                      lab/expandable_allocator.h)
//   "policy:native[,options...]"       the native engine, said explicitly
//
// "policy" is the lab's own key: AllocatorConfig::parse never sees it, so
// the plugin and the C API cannot be configured with it.
#pragma once

#include <string>
#include <string_view>

#include "allocator/config.h"

namespace cachealloc {

enum class LabPolicy { kNative, kExpandable };
// "native" or "expandable".
const char* lab_policy_name(LabPolicy policy);

struct LabConfig {
  std::string text;  // as given
  LabPolicy policy = LabPolicy::kNative;
  AllocatorConfig config;  // native options in force
  // For tables and charts: the text, "defaults" for "", and for "trace" the
  // recorded config's text ("trace (max_split_size_mb:128)").
  std::string label() const;
};

// Parses `text` (see above); `recorded` is the trace's config, used for
// "trace". Throws ConfigError for an unknown policy, a bad native option,
// or an option the lab cannot honour (per_process_memory_fraction: use a
// memory limit; backend:cudaMallocAsync; expandable_segments:True: use
// policy:expandable).
LabConfig parse_lab_config(std::string_view text, const AllocatorConfig& recorded);

}  // namespace cachealloc
