#include "stats/snapshot.h"

#include <algorithm>

namespace cachealloc {

const char* block_state_name(const Block& b) {
  return b.allocated ? "active_allocated" : b.is_pending_free() ? "active_pending_free" : "inactive";
}
namespace {

PyValue int_value(uint64_t v) { return PyValue::integer(static_cast<int64_t>(v)); }

}  // namespace

PyValue frames_to_py(const ContextPtr& context) { return SnapshotFrames().list(context); }

PyValue segment_to_py(const SegmentView& s) {
  SnapshotFrames frames;
  return segment_to_py(s, frames);
}

PyValue trace_entry_to_py(const TraceEntry& t) {
  SnapshotFrames frames;
  return trace_entry_to_py(t, frames);
}

PyValue segment_to_py(const SegmentView& s, SnapshotFrames& frames) {
  size_t total = 0, allocated = 0, active = 0, requested = 0;
  PyValue blocks = PyValue::list();
  for (const Block* b : s.blocks) {
    const bool is_active = !b->is_free();
    total += b->size;
    if (b->allocated) allocated += b->size;
    if (is_active) {
      active += b->size;
      requested += b->requested_size;
    }
    PyValue d = PyValue::dict();
    d.set("address", int_value(b->address));
    d.set("size", int_value(b->size));
    d.set("requested_size", int_value(b->requested_size));
    d.set("state", PyValue::str(block_state_name(*b)));
    d.set("frames", frames.list(b->context_when_allocated));
    blocks.append(std::move(d));
  }
  PyValue d = PyValue::dict();
  d.set("device", PyValue::integer(s.device));
  d.set("address", int_value(s.address));
  d.set("total_size", int_value(total));
  d.set("allocated_size", int_value(allocated));
  d.set("active_size", int_value(active));
  d.set("requested_size", int_value(requested));
  d.set("stream", int_value(s.stream));
  d.set("segment_type", PyValue::str(s.is_small ? "small" : "large"));
  d.set("segment_pool_id", PyValue::tuple({int_value(s.pool_id.first), int_value(s.pool_id.second)}));
  d.set("is_expandable", PyValue::boolean(s.is_expandable));
  d.set("frames", frames.list(s.context ? *s.context : nullptr));
  d.set("blocks", std::move(blocks));
  return d;
}

PyValue trace_entry_to_py(const TraceEntry& t, SnapshotFrames& frames) {
  PyValue d = PyValue::dict();
  d.set("action", PyValue::str(action_name(t.action)));
  d.set(t.action == TraceAction::kOom ? "device_free" : "addr", int_value(t.address));
  d.set("size", int_value(t.size));
  d.set("stream", int_value(t.stream));
  d.set("time_us", PyValue::integer(t.time_us));
  d.set("compile_context", PyValue::str("N/A"));
  d.set("user_metadata", PyValue::str(""));
  if (t.context) d.set("frames", frames.list(t.context));
  return d;
}

PyValue allocator_settings_to_py(const AllocatorConfig& c) {
  PyValue d = PyValue::dict();
  d.set("PYTORCH_CUDA_ALLOC_CONF", PyValue::str(c.source));
  d.set("max_split_size", PyValue::integer(c.max_split_size_stat()));
  d.set("garbage_collection_threshold", PyValue::floating(c.garbage_collection_threshold));
  d.set("expandable_segments", PyValue::boolean(c.expandable_segments));
  d.set("pinned_num_register_threads",
        int_value(c.pinned_num_register_threads));
  d.set("release_lock_on_cudamalloc", PyValue::boolean(c.release_lock_on_cudamalloc));
  d.set("pinned_use_cuda_host_register",
        PyValue::boolean(c.pinned_use_cuda_host_register));
  d.set("graph_capture_record_stream_reuse",
        PyValue::boolean(c.graph_capture_record_stream_reuse));
  PyValue divisions = PyValue::dict();
  for (size_t i = 0; i < AllocatorConfig::kRoundupIntervals; ++i)
    divisions.set(std::to_string(size_t{1} << i), int_value(c.roundup_power2_divisions[i]));
  d.set("roundup_power2_divisions", std::move(divisions));
  return d;
}

PyValue make_snapshot(const std::vector<SegmentView>& segments,
                      const std::vector<std::vector<TraceEntry>>& traces,
                      const AllocatorConfig& config) {
  std::vector<const SegmentView*> order;
  for (const SegmentView& s : segments) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const SegmentView* a, const SegmentView* b) {
    return a->address < b->address;
  });
  SnapshotFrames frames;
  PyValue segs = PyValue::list();
  for (const SegmentView* s : order) segs.append(segment_to_py(*s, frames));
  PyValue device_traces = PyValue::list();
  for (const auto& per_device : traces) {
    PyValue list = PyValue::list();
    for (const TraceEntry& t : per_device) list.append(trace_entry_to_py(t, frames));
    device_traces.append(std::move(list));
  }
  return snapshot_root(std::move(segs), std::move(device_traces), config);
}

PyValue snapshot_root(PyValue segments, PyValue traces, const AllocatorConfig& config) {
  PyValue root = PyValue::dict();
  root.set("segments", std::move(segments));
  root.set("device_traces", std::move(traces));
  root.set("allocator_settings", allocator_settings_to_py(config));
  root.set("external_annotations", PyValue::list());
  return root;
}

}  // namespace cachealloc
