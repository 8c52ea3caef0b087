// A config's PYTORCH_CUDA_ALLOC_CONF line, written back from the parsed
// options: the advisor's recommendation, and the key by which it tells two
// candidate configs apart (equal lines = the same engine behaviour).
#pragma once

#include <string>

#include "allocator/config/config.h"

namespace cachealloc {

// The options that steer device memory, each only where it differs from
// native's default, in a fixed order: expandable_segments,
// max_split_size_mb, max_non_split_rounding_mb (only with
// max_split_size_mb: without it no block is oversize and the key does
// nothing), roundup_power2_divisions (one number when every interval has
// the same count, else the [MiB:n,...,>:n] form), and
// garbage_collection_threshold. Every key is one native 2.11 accepts.
// "" for defaults. Options that do not steer device memory (pinned_*,
// release_lock_on_cudamalloc, backend) are left out.
std::string conf_line(const AllocatorConfig& config);

// `line` followed by per_process_memory_fraction:F, where F is
// `limit / device_memory` to 6 decimals, rounded so that the limit native
// computes from it (F x device_memory, truncated) is never above `limit`.
// Garbage collection acts only under such a fraction.
std::string with_memory_fraction(const std::string& line, size_t limit, size_t device_memory);

}  // namespace cachealloc
