// torch.cuda.memory._snapshot() under the glue: cachealloc's segments,
// blocks, trace and settings converted into PyTorch's SnapshotInfo, which
// PyTorch then turns into native's snapshot dict (segments, device_traces,
// allocator_settings) unchanged; and the trace actions, shared with the
// trace trackers' segment events.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstddef>
#include <iterator>

namespace cachealloc_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;
using SnapshotInfo = CCA::SnapshotInfo;
// By decltype: the type's namespace differs between torch releases.
using TraceEntry = decltype(SnapshotInfo::device_traces)::value_type::value_type;

// Native's trace actions by the C API's visitor action code
// (bindings/runtime/visitor_action.h: 0 segment_alloc ... 8 segment_unmap).
inline constexpr TraceEntry::Action kTraceActions[] = {
    TraceEntry::SEGMENT_ALLOC, TraceEntry::SEGMENT_FREE, TraceEntry::ALLOC,
    TraceEntry::FREE_REQUESTED, TraceEntry::FREE_COMPLETED, TraceEntry::OOM,
    TraceEntry::SNAPSHOT, TraceEntry::SEGMENT_MAP, TraceEntry::SEGMENT_UNMAP};
inline constexpr int kTraceActionCount = static_cast<int>(std::size(kTraceActions));

// The snapshot: with a pool's id only that pool's segments ((0, 0): all),
// with `include_traces` every device's trace. Settings the glue leaves to
// PyTorch (the pinned allocator's) are read from PyTorch's parse. Throws
// c10::Error with the library's message when a C call fails.
SnapshotInfo snapshot_info(c10::cuda::MempoolId_t mempool, bool include_traces);

}  // namespace cachealloc_torch
