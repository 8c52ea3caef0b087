// The glue's snapshot (snapshot.h): one visit of cachealloc's state
// through the C API's snapshot visitor, collected into PyTorch's types.
#include "bindings/torch/snapshot.h"

#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "bindings/c_api/cachealloc.h"
#include "bindings/torch/recorded_context.h"

namespace cachealloc_torch {
namespace {

using SegmentInfo = decltype(SnapshotInfo::segments)::value_type;

void check_status(int status) { TORCH_CHECK(status == 0, cachealloc_last_error()); }

}  // namespace

SnapshotInfo snapshot_info(c10::cuda::MempoolId_t mempool, bool include_traces) {
  struct Collector {
    SnapshotInfo info;
    bool traces = true;
    // As native: a pool's id lists only that pool's segments; (0, 0) all.
    c10::cuda::MempoolId_t only{0, 0};
    bool keep = true;  // the segment being visited is listed
  } c;
  c.traces = include_traces;
  c.only = mempool;
  c.info.device_traces.resize(static_cast<size_t>(std::max(cachealloc_device_count(), 1)));
  cachealloc_snapshot_visitor v{};
  v.segment = [](void* u, int device, uint64_t address, uint64_t, void* stream, int is_small,
                 void* ctx, uint64_t pool_first, uint64_t pool_second, int is_expandable) {
    auto* c = static_cast<Collector*>(u);
    const c10::cuda::MempoolId_t pool{pool_first, pool_second};
    c->keep = (c->only.first == 0 && c->only.second == 0) || pool == c->only;
    if (!c->keep) return;
    auto& info = c->info;
    SegmentInfo s;
    s.owner_private_pool_id = pool;
    // Native numbers every Block it constructs (a thread-local count) and
    // ProcessGroupNCCL.register_mem_pool sorts a pool's segments by the
    // head's number, asserting it is set (>= 0), to register them in
    // creation order. cachealloc keeps no such count: segments are
    // numbered in the order they are visited (address order), which is
    // all NCCL's ordinary registration needs; symmetric-memory windows,
    // which need the same order on every rank, are not covered.
    s.registration_counter = static_cast<int32_t>(info.segments.size());
    s.device = static_cast<c10::DeviceIndex>(device);
    s.address = address;
    s.stream = static_cast<decltype(s.stream)>(stream);
    s.is_large = !is_small;
    s.is_expandable = is_expandable != 0;
    s.context_when_allocated = context_of(ctx);
    info.segments.push_back(std::move(s));
  };
  v.block = [](void* u, uint64_t size, uint64_t requested, int allocated, int active, void* ctx) {
    if (!static_cast<Collector*>(u)->keep) return;
    SegmentInfo& s = static_cast<Collector*>(u)->info.segments.back();
    decltype(s.blocks)::value_type b;
    b.size = size;
    b.requested_size = requested;
    b.allocated = allocated != 0;
    b.active = active != 0;
    b.context_when_allocated = context_of(ctx);
    s.total_size += size;
    if (b.allocated) s.allocated_size += size;
    if (b.active) {
      s.active_size += size;
      s.requested_size += requested;
    }
    s.blocks.push_back(std::move(b));
  };
  v.trace = [](void* u, int device, int action, uint64_t addr, uint64_t size, void* stream,
               int64_t time_us, void* ctx) {
    auto* c = static_cast<Collector*>(u);
    if (!c->traces) return;
    const auto* recorded = static_cast<const RecordedContext*>(ctx);
    const ContextPtr frames =
        recorded && recorded->frames_in_trace ? recorded->frames : nullptr;
    TraceEntry te(kTraceActions[action], static_cast<c10::DeviceIndex>(device), addr, size,
                  static_cast<cudaStream_t>(stream), c10::cuda::MempoolId_t{0, 0}, 0,
                  frames, recorded ? recorded->compile_context : kNoCompileContext,
                  recorded ? recorded->user_metadata : std::string());
    te.time_.t_ = time_us;  // snapshots carry microseconds since the epoch
    c->info.device_traces.at(static_cast<size_t>(device)).push_back(std::move(te));
  };
  check_status(cachealloc_visit_snapshot(&v, &c));

  uint64_t max_split = 0, divisions[16] = {};
  double gc = 0;
  const char* conf = "";
  check_status(cachealloc_config_info(&max_split, &gc, divisions, &conf));
  auto& m = c.info.config_metadata;
  m.garbage_collection_threshold = gc;
  m.max_split_size = max_split;
  // The pinned (host) allocator stays PyTorch's, so its settings are read
  // from PyTorch's parse of the same texts (cachealloc validated each one
  // before PyTorch parsed it); so are the flags cachealloc accepts without
  // acting on (release_lock_on_cudamalloc). expandable_segments is
  // cachealloc's own: PyTorch parses the environment's text only when its
  // own allocator starts, which it never does here.
  using CudaConfig = CCA::CUDAAllocatorConfig;
  m.pinned_num_register_threads = CudaConfig::pinned_num_register_threads();
  const int expandable = cachealloc_expandable_segments();
  if (expandable < 0) check_status(expandable);
  m.expandable_segments = expandable == 1;
  m.release_lock_on_malloc = CudaConfig::release_lock_on_cudamalloc();
  m.pinned_use_host_register = CudaConfig::pinned_use_cuda_host_register();
  m.graph_capture_record_stream_reuse = CudaConfig::graph_capture_record_stream_reuse();
  m.last_allocator_settings = conf;
  m.roundup_power2_divisions.assign(divisions, divisions + 16);
  return std::move(c.info);
}

}  // namespace cachealloc_torch
