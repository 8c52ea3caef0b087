// Lockstep replay of a recorded trace through the engine.
//
// The recorded requests (alloc, free, the size of each OOM) are fed to a
// fresh engine on a RecordedAddressDevice; after each request the events the engine
// emitted must equal the events recorded for it: the segment frees and
// allocations it caused, then the alloc/oom/free entries, address for
// address. A run of segment frees that no request explains is an
// empty_cache() call and is replayed as one.
#pragma once

#include "replay/replay_options.h"
#include "replay/trace.h"

namespace cachealloc {

// Throws ConfigError for a bad config; never throws for divergence.
ReplayResult replay_trace(const RecordedTrace& trace, const ReplayOptions& options);

}  // namespace cachealloc
