// Builds the dict torch.cuda.memory._snapshot() returns, with native's keys
// and kinds, from the engine's segments and the history:
//
//   {"segments": [...], "device_traces": [[...], ...],
//    "allocator_settings": {...}, "external_annotations": [...]}
//
// PyTorch's memory_viz viewer walks device_traces backwards from segments,
// so both must describe the same moment: build under the engine's lock.
#pragma once

#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "pickle/py_value.h"
#include "stats/history.h"
#include "stats/snapshot_frames.h"

namespace cachealloc {

// One segment dict ("device", "address", ..., "blocks"). With `frames`,
// its frames lists are shared with everything else converted through it
// (stats/snapshot_frames.h); without, they are its own.
// A block's state as native's snapshot names it: "active_allocated",
// "active_pending_free" (freed, waiting for stream events) or "inactive".
const char* block_state_name(const Block& b);

PyValue segment_to_py(const SegmentView& segment);
PyValue segment_to_py(const SegmentView& segment, SnapshotFrames& frames);
// One trace entry dict ("action", "addr" or "device_free", "size", ...);
// `frames` as for segment_to_py.
PyValue trace_entry_to_py(const TraceEntry& entry);
PyValue trace_entry_to_py(const TraceEntry& entry, SnapshotFrames& frames);
// A list of frame dicts {"name", "filename", "line"}; empty for null. The
// strings are the context's (shared, not copied); a frame repeated within
// the stack is one dict.
PyValue frames_to_py(const ContextPtr& context);
// The "allocator_settings" dict.
PyValue allocator_settings_to_py(const AllocatorConfig& config);

// The top-level dict from already converted parts: `segments` a list of
// segment dicts in address order, `traces` a list (one per device) of
// trace-entry dict lists.
PyValue snapshot_root(PyValue segments, PyValue traces, const AllocatorConfig& config);

// The whole snapshot. `segments`: every device's segments, any order (they
// are sorted by address as native does); `traces`: one list per device.
// Frames are converted through one SnapshotFrames: the tree and its pickle
// hold each distinct stack and frame once.
PyValue make_snapshot(const std::vector<SegmentView>& segments,
                      const std::vector<std::vector<TraceEntry>>& traces,
                      const AllocatorConfig& config);

}  // namespace cachealloc
