// An engine's own history as a RecordedTrace: what parse_trace would build
// from a snapshot of that engine, without the pickle. For CPU tests and
// benchmarks that record a run on a SimulatedDevice and replay it.
#pragma once

#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "replay/trace.h"
#include "stats/history.h"

namespace cachealloc {

// One device's trace (device 0): `entries` as HistoryRecorder::entries()
// returns them (snapshot and user_defined entries are skipped and counted,
// as parse_trace does), `segments` as the engine's segments() at the end,
// `config` as the run's settings. Times are copied as they are (a set
// clock's microseconds, or converted ticks).
RecordedTrace trace_from_history(const std::vector<TraceEntry>& entries,
                                 const std::vector<SegmentView>& segments,
                                 const AllocatorConfig& config);

}  // namespace cachealloc
