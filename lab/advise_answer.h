// The advisor's answer, from its ranked rows (advise.h): which row is the
// trace's own, what to recommend, the PYTORCH_CUDA_ALLOC_CONF line, and the
// sentences that say it.
//
// The top row is recommended unless it saves under 1 % of the trace's own
// minimum memory and OOMs no less under the limit: then nothing helps, the
// trace's own settings are kept, and the headline says plainly that the
// peak is the working set ("no setting saves more than X %"). A
// recommendation that collects garbage carries per_process_memory_fraction
// (the limit over the device's memory): native collects only under one.
// Every size in the sentences is in one unit (byte_unit.h).
#pragma once

#include "lab/advise.h"

namespace cachealloc {

// Fills baseline, recommended, nothing_helps, best_saving, env_line,
// largest_bytes, headline and reason of `advice`, whose `ranked` (best
// first, one row labelled "trace...") and `configs_run` are set.
void answer(Advice& advice, const AdviseOptions& options);

}  // namespace cachealloc
