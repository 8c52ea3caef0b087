// What a profiler needs from the allocation or free that made a change:
// the block's size and the device's totals right after it, measured under
// the device lock that call already holds (PyTorch's profiler records
// exactly these three numbers per allocation and per free).
//
// A BlockReporter is an observer the runtime attaches to each device's
// engine, after its StatsCollector, the first time a caller asks for a
// report (Runtime::allocate_reported/deallocate_reported); until then it
// costs nothing. Once attached (until the next init), each engine event
// costs one more observer call, which returns at once while no report is
// in flight on any thread (benchmarks/count_profiler_path.sh:
// capi+reporter-idle). The caller's thread sets a thread-local pointer for
// the length of its call (ReportRequest), so the reporter fills exactly
// the report of the call whose event it sees, never another thread's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/engine/observe/engine_observer.h"
#include "stats/device_stats.h"

namespace cachealloc {

struct BlockReport {
  size_t size = 0;         // the block's bytes, as allocated_bytes counts them
  int device = -1;         // the device holding the block; -1: no block reported
  int64_t allocated = 0;   // allocated_bytes.all.current right after the change
  int64_t reserved = 0;    // reserved_bytes.all.current at the same moment
};

// The calling thread's pending report, for the length of one allocate or
// deallocate (RAII; nests nothing: one call at a time per thread).
class ReportRequest {
 public:
  // An allocation's report (`address` 0), or the free of `address`.
  ReportRequest(BlockReport& out, uintptr_t address);
  ~ReportRequest();
  ReportRequest(const ReportRequest&) = delete;
  ReportRequest& operator=(const ReportRequest&) = delete;
};

class BlockReporter final : public EngineObserver {
 public:
  // `stats`: the device's collector, attached before this reporter (so it
  // has counted an event when this one sees it); must outlive it.
  explicit BlockReporter(const StatsCollector& stats) : stats_(stats) {}
  void on_event(const EngineEvent& e) override;

 private:
  const StatsCollector& stats_;
};

}  // namespace cachealloc
